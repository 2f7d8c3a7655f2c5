"""A stand-in OpenAI-compatible server on loopback, in this process: GET /v1/models and POST /v1/chat/completions,
answered by a Python function. Used by the evaluate tests to drive the server backend and olmOCR's pipeline
protocol through every branch without a model.

``answer(request)`` gets a :class:`Seen` (the JSON body, the decoded page image, the request's headers) and returns a
dict: ``content`` and ``finish_reason`` (one choice), or ``status`` (an HTTP error), or ``sleep`` (seconds to stall
first), or ``trickle`` (seconds between the answer's bytes: a server that never quite finishes).
``owner`` is what ``GET /v1/models`` says serves each model (``owned_by``: ``vllm`` for a vLLM server).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

from PIL import Image


@dataclass
class Seen:
    body: dict
    image: Image.Image | None
    headers: dict = field(default_factory=dict)

    @property
    def temperature(self) -> float:
        return self.body["temperature"]


def image_of(body: dict) -> Image.Image | None:
    for message in body.get("messages", []):
        for part in message.get("content", []):
            if isinstance(part, dict) and part.get("type") == "image_url":
                data = part["image_url"]["url"].split(",", 1)[1]
                return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    return None


def pixels(image: Image.Image) -> bytes:
    """What identifies a page image (size and pixels)."""
    return repr(image.size).encode() + image.tobytes()


class StandIn:
    """The server's state: every request seen, and the most requests ever in flight at once."""

    def __init__(self, answer: Callable[[Seen], dict], models: tuple[str, ...] = ("standin",), owner: str = "vllm"):
        self.answer, self.models, self.owner = answer, models, owner
        self.seen: list[Seen] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()


def _handler(state: StandIn) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, data: Any) -> None:
            raw = json.dumps(data).encode()
            with contextlib.suppress(OSError):  # the client may have given up (timeout)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": state.owner}
                                                            for m in state.models]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen = Seen(body, image_of(body), dict(self.headers))
            with state.lock:
                state.seen.append(seen)
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                reply = state.answer(seen)
                time.sleep(reply.get("sleep", 0))
                if "status" in reply:
                    self._send(reply["status"], {"error": "stand-in error"})
                    return
                if "trickle" in reply:
                    self._trickle(reply["trickle"])
                    return
                content = reply["content"]
                self._send(200, {
                    "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": i, "message": {"role": "assistant", "content": content},
                                 "finish_reason": reply.get("finish_reason", "stop")} for i in range(body.get("n", 1))],
                    "usage": {"prompt_tokens": 100, "completion_tokens": len(content.split()) * body.get("n", 1),
                              "total_tokens": 100 + len(content.split()) * body.get("n", 1)},
                })
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _trickle(self, seconds: float) -> None:
            """Headers at once, then one byte of the body every ``seconds``, until the client hangs up."""
            with contextlib.suppress(OSError):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(100000):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(seconds)

        def log_message(self, *args):
            pass

    return Handler


@contextlib.contextmanager
def standin_server(answer: Callable[[Seen], dict], models: tuple[str, ...] = ("standin",),
                   owner: str = "vllm") -> Iterator[tuple[str, StandIn]]:
    """Serve ``answer`` on a free loopback port; yields ``(base URL, state)``."""
    state = StandIn(answer, models, owner)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
