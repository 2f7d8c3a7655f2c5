"""Transcription backends: Hugging Face ``generate``, vLLM's offline engine, an OpenAI-compatible server.

Each takes a list of :class:`~olmocr_rl.evaluation.common.Request` and returns, per request, its ``n``
:class:`~olmocr_rl.evaluation.common.Completion`. All three decode alike: plain greedy (temperature 0) or plain
temperature sampling (top-p 1, no top-k, no repetition penalty), the vision pad tokens never sampled, the prompt
the dataset's chat prompt with one image. ``done(i, completions)`` is called as request ``i`` finishes (progress).
"""

from __future__ import annotations

import base64
import io
import json
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from olmocr_rl.evaluation.common import Completion, EvaluateError, Request, Sampling

BACKENDS = ("hf", "vllm", "server")
Done = Callable[[int, list[Completion]], None] | None


def _chunks(requests: Sequence[Request], size: int) -> list[list[int]]:
    """Indices of ``requests`` in order, cut into runs of at most ``size`` that share temperature, n and cap."""
    chunks: list[list[int]] = []
    for i, request in enumerate(requests):
        last = requests[chunks[-1][0]] if chunks else None
        same = last is not None and (last.temperature, last.n, last.max_tokens) == (
            request.temperature, request.n, request.max_tokens)
        if same and len(chunks[-1]) < size:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    return chunks


# --- Hugging Face generate -------------------------------------------------------------------------


def generation_config(model, processor, sampling: Sampling, max_new_tokens: int):
    """A GenerationConfig with the checkpoint's special tokens and this run's decoding only.

    Plain greedy or plain temperature sampling (top-p 1, no top-k, no repetition penalty), as the
    trainer samples, and the vision pad tokens banned (as the vLLM backends' ``bad_words``). The checkpoint's
    own defaults (Qwen2.5-VL ships top_k=1, top_p=0.001, repetition_penalty=1.05) would otherwise turn sampling
    into near-greedy decoding.
    """
    from transformers import GenerationConfig

    from olmocr_rl.model.families import vision_pad_ids

    stored = model.generation_config
    tokenizer = processor.tokenizer
    eos = stored.eos_token_id if stored.eos_token_id is not None else tokenizer.eos_token_id
    pad = stored.pad_token_id if stored.pad_token_id is not None else tokenizer.pad_token_id
    if pad is None:
        pad = eos[0] if isinstance(eos, list) else eos
    # Every decoding knob is set: unset (None) ones would be filled from the checkpoint's config.
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        num_return_sequences=sampling.num_samples,
        do_sample=sampling.do_sample,
        temperature=sampling.temperature if sampling.do_sample else 1.0,
        top_p=1.0,
        top_k=0 if sampling.do_sample else None,  # greedy ignores it (and warns when it is set)
        repetition_penalty=1.0,
        bad_words_ids=[[token] for token in vision_pad_ids(processor)],
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=stored.bos_token_id,
    )


def transcribe_batch(model, processor, items: Sequence[dict], config, seed: int) -> list[list[tuple[str, int, bool]]]:
    """Transcribe dataset items (``prompt``, ``image``) in one ``generate`` call.

    Returns, per item, ``config.num_return_sequences`` tuples ``(raw text, new tokens, hit the
    max_new_tokens cap)``; the text is decoded without special tokens and keeps its front matter.
    Prompts are padded on the left whatever the tokenizer's ``padding_side``.
    """
    import torch

    texts = [processor.apply_chat_template(item["prompt"], add_generation_prompt=True, tokenize=False) for item in items]
    # Left padding: every prompt must end where its generation starts (the tokenizer's default is right).
    inputs = processor(text=texts, images=[item["image"] for item in items], return_tensors="pt", padding=True,
                       padding_side="left")
    inputs = inputs.to(model.device)
    torch.manual_seed(seed)
    with torch.inference_mode():
        sequences = model.generate(**inputs, generation_config=config)
    completions = sequences[:, inputs["input_ids"].shape[1] :].cpu()

    eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    stop_ids = torch.tensor(sorted({t for t in [*eos, config.pad_token_id] if t is not None}))
    results: list[tuple[str, int, bool]] = []
    for row in completions:
        stops = torch.isin(row, stop_ids).nonzero()
        tokens = int(stops[0]) if len(stops) else len(row)
        capped = not len(stops) and len(row) >= config.max_new_tokens
        text = processor.tokenizer.decode(row[:tokens], skip_special_tokens=True)
        # Cut at the cap inside a multi-byte character, the last token decodes to U+FFFD; vLLM's incremental
        # detokenizer withholds such an unfinished character, so drop it here too (same text on every backend).
        results.append((text.rstrip("\ufffd") if capped else text, tokens, capped))
    k = config.num_return_sequences
    return [results[i * k : (i + 1) * k] for i in range(len(items))]


class HFBackend:
    """Hugging Face ``generate``: requests in batches of ``batch_size`` (same temperature), left-padded; each batch
    seeded from its first request's seed."""

    name = "hf"

    def __init__(self, policy, processor, batch_size: int = 1):
        self.policy, self.processor, self.batch_size = policy, processor, batch_size

    def generate(self, requests: Sequence[Request], done: Done = None) -> list[list[Completion]]:
        out: list[list[Completion]] = [[] for _ in requests]
        for chunk in _chunks(requests, self.batch_size):
            first = requests[chunk[0]]
            sampling = Sampling(first.n, first.temperature > 0, float(first.temperature))
            config = generation_config(self.policy, self.processor, sampling, first.max_tokens)
            items = [{**requests[i].item, "prompt": requests[i].messages, "image": requests[i].image} for i in chunk]
            for i, samples in zip(chunk, transcribe_batch(self.policy, self.processor, items, config, first.seed)):
                out[i] = [Completion(text, tokens, "length" if capped else "stop") for text, tokens, capped in samples]
                if done:
                    done(i, out[i])
        return out

    def close(self) -> None:
        pass


# --- vLLM's offline engine -------------------------------------------------------------------------


class VLLMBackend:
    """vLLM's offline engine (``vllm.LLM``) on this machine's devices.

    As the trainer's vLLM path: the prompt is the chat template's text with one image placeholder, which vLLM
    expands to the image's features (built once: every page has the same prompt text), the page image goes as
    ``multi_modal_data``, and the vision pad tokens are ``bad_words``. Each request carries its own seed.
    """

    name = "vllm"

    def __init__(self, model: str, *, dtype: str, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                 max_model_len: int = 16384, gpu_memory_utilization: float = 0.9, seed: int = 0,
                 enforce_eager: bool = False, kv_cache_bytes: int | None = None, llm=None):
        from transformers import AutoProcessor

        from olmocr_rl.config.grpo import vision_pad_tokens

        if llm is None:
            os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the report's (--json)
            from vllm import LLM

            llm = LLM(model=model, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                      data_parallel_size=data_parallel_size, max_model_len=max_model_len,
                      gpu_memory_utilization=gpu_memory_utilization, seed=seed, enforce_eager=enforce_eager,
                      limit_mm_per_prompt={"image": 1}, kv_cache_memory_bytes=kv_cache_bytes)
        self.llm = llm
        self.processor = AutoProcessor.from_pretrained(model)
        self.bad_words = vision_pad_tokens(self.processor.tokenizer)
        self._prompts: dict[str, str] = {}
        self._calls = 0

    def prompt_text(self, messages: list) -> str:
        """The chat template's text for ``messages``, built once per distinct prompt."""
        cache_key = json.dumps(messages, sort_keys=True)
        if cache_key not in self._prompts:
            self._prompts[cache_key] = self.processor.apply_chat_template(messages, add_generation_prompt=True,
                                                                          tokenize=False)
        return self._prompts[cache_key]

    def sampling_params(self, request: Request):
        from vllm import SamplingParams

        return SamplingParams(n=request.n, temperature=request.temperature, top_p=1.0, top_k=0,
                              repetition_penalty=1.0, max_tokens=request.max_tokens, seed=request.seed,
                              bad_words=list(self.bad_words), skip_special_tokens=True)

    def generate(self, requests: Sequence[Request], done: Done = None) -> list[list[Completion]]:
        """The requests added to the engine together, then the engine stepped until they finish (as ``LLM.generate``
        does); ``done`` is called as each one finishes, so a page is written as soon as it is transcribed, not when
        the whole call returns. A stop aborts the requests still running."""
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        self._calls += 1
        ids = [f"olmocr_rl-{self._calls}-{i}" for i in range(len(requests))]
        left: set[str] = set()
        out: list[list[Completion]] = [[] for _ in requests]
        try:
            for request_id, request in zip(ids, requests):
                params = self.sampling_params(request)
                params.output_kind = RequestOutputKind.FINAL_ONLY  # the finished sequences only, as LLM.generate
                engine.add_request(request_id, {"prompt": self.prompt_text(request.messages),
                                                "multi_modal_data": {"image": request.image}}, params)
                left.add(request_id)
            index = {request_id: i for i, request_id in enumerate(ids)}
            while left and engine.has_unfinished_requests():
                for output in engine.step():
                    if output.finished and output.request_id in left:
                        left.discard(output.request_id)
                        i = index[output.request_id]
                        out[i] = self.completions(output)
                        if done:
                            done(i, out[i])
        finally:
            if left:
                engine.abort_request(sorted(left))
        return out

    @staticmethod
    def completions(output) -> list[Completion]:
        """One finished request's sequences (token counts before the end token, as hf counts them: vLLM's token_ids
        end with the EOS it stopped on)."""
        prompt_tokens = len(output.prompt_token_ids or [])
        return [Completion(c.text, len(c.token_ids) - (c.finish_reason == "stop" and c.stop_reason is None),
                           "length" if c.finish_reason == "length" else "stop", prompt_tokens)
                for c in sorted(output.outputs, key=lambda c: c.index)]

    def close(self) -> None:
        """Stop the engine's processes and free it (its KV cache and weights) now, not at the next garbage
        collection."""
        import gc

        engine = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if engine is not None and callable(getattr(engine, "shutdown", None)):
            engine.shutdown()
        self.llm = None
        gc.collect()


# --- an OpenAI-compatible server -------------------------------------------------------------------


def _image_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)  # lossless (the server decodes the pixels the others see), fast
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _openai_messages(messages: list, image) -> list:
    """The dataset's chat prompt with its image part as an ``image_url`` (a PNG data URL), order kept."""
    out = []
    for message in messages:
        parts = []
        for part in message["content"]:
            if part.get("type") == "image":
                parts.append({"type": "image_url", "image_url": {"url": _image_url(image)}})
            else:
                parts.append({"type": "text", "text": part["text"]})
        out.append({"role": message["role"], "content": parts})
    return out


class ServerBackend:
    """Any OpenAI-compatible endpoint (``POST /v1/chat/completions``): at most ``concurrency`` requests in flight,
    each with a ``timeout`` and up to ``retries`` retries after a connection error, a timeout, a 429 or a 5xx,
    waiting ``backoff_s`` × 2^try between them. A request that still fails is a Completion with finish ``error``
    (counted in the report), not an exception. vLLM's own request fields (``top_k``, ``repetition_penalty``,
    ``bad_words``, ``skip_special_tokens``) go only to a vLLM server (:meth:`decide_vllm_fields`)."""

    name = "server"

    def __init__(self, url: str, model: str, *, concurrency: int = 8, timeout: float = 600.0, retries: int = 3,
                 backoff_s: float = 2.0, api_key: str | None = None):
        base = url.rstrip("/")
        self.base = base[: -len("/v1")] if base.endswith("/v1") else base
        self.model, self.concurrency, self.timeout = model, concurrency, timeout
        self.retries, self.backoff_s, self.api_key = retries, backoff_s, api_key
        self.failures: list[str] = []
        self.served: list[dict] = []  # GET /v1/models' entries
        self.vllm_fields = True

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def check(self, check_timeout: float = 10.0) -> None:
        """EvaluateError (one line) when the server cannot be reached or does not serve ``model``."""
        url = f"{self.base}/v1/models"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=self._headers()),
                                        timeout=check_timeout) as response:
                self.served = [entry for entry in json.loads(response.read()).get("data", [])
                               if isinstance(entry, dict)]
        except (urllib.error.URLError, OSError, ValueError, AttributeError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise EvaluateError(f"--server_url {self.base}: cannot reach GET {url} ({reason}); start an "
                                "OpenAI-compatible server there (e.g. `vllm serve MODEL`) or fix the URL") from None
        served = [entry.get("id") for entry in self.served]
        if self.model not in served:
            raise EvaluateError(f"--server_model {self.model!r}: the server at {self.base} serves "
                                f"{', '.join(map(repr, served)) or 'no model'}; pass one of them")

    def decide_vllm_fields(self, mode: str, note: Callable[[str], None]) -> None:
        """Send vLLM's request fields (``mode`` on), not (off), or when GET /v1/models said the model is served by
        vLLM (auto: its ``owned_by`` is ``vllm``); ``note`` gets one line when they are left out."""
        owner = next((entry.get("owned_by") for entry in self.served if entry.get("id") == self.model), None)
        self.vllm_fields = mode == "on" or (mode == "auto" and owner == "vllm")
        if not self.vllm_fields:
            why = "--server_vllm_fields off" if mode == "off" else f"GET /v1/models says owned_by {owner!r}, not vllm"
            note(f"[evaluate] note: the server at {self.base} is taken as not vLLM ({why}): vLLM's request fields "
                 "top_k, repetition_penalty, bad_words and skip_special_tokens are left out, so its own defaults "
                 "apply to them (a top-k or repetition penalty it sets, vision pad tokens not banned); "
                 "--server_vllm_fields on sends them")

    def body(self, request: Request) -> dict:
        """The chat-completions request: the page's prompt and image, plain decoding, and to a vLLM server vLLM's
        extra fields ``top_k``, ``repetition_penalty``, ``bad_words`` and ``skip_special_tokens``."""
        from olmocr_rl.config.grpo import VISION_PAD_TOKENS

        body = {
            "model": self.model, "messages": _openai_messages(request.messages, request.image),
            "max_tokens": request.max_tokens, "temperature": request.temperature, "top_p": 1.0, "n": request.n,
            "seed": request.seed,
        }
        if self.vllm_fields:
            body.update(top_k=-1, repetition_penalty=1.0, bad_words=list(VISION_PAD_TOKENS), skip_special_tokens=True)
        return body

    def _post(self, payload: bytes) -> tuple[int, bytes]:
        request = urllib.request.Request(f"{self.base}/v1/chat/completions", data=payload, headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def one(self, request: Request) -> list[Completion]:
        payload = json.dumps(self.body(request)).encode("utf-8")
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                status, raw = self._post(payload)
            except (urllib.error.URLError, OSError) as exc:  # refused, reset, timed out
                problem = f"{type(getattr(exc, 'reason', exc)).__name__}: {getattr(exc, 'reason', exc)}"
                continue
            if status == 429 or status >= 500:
                problem = f"HTTP {status}"
                continue
            if status != 200:
                problem = f"HTTP {status}: {raw[:200].decode('utf-8', 'replace')}"
                break  # the request itself is refused: retrying cannot help
            try:
                return self._parse(raw, request.n)
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                problem = f"an answer that is not a chat completion ({type(exc).__name__}: {exc})"
                break
        message = f"{request.key}: {problem} after {attempt + 1} tr{'y' if attempt == 0 else 'ies'}"
        self.failures.append(message)
        return [Completion(message, 0, "error") for _ in range(request.n)]

    @staticmethod
    def _parse(raw: bytes, n: int) -> list[Completion]:
        data = json.loads(raw)
        if len(data["choices"]) != n:
            raise ValueError(f"{len(data['choices'])} choices for n={n}")
        usage = data.get("usage") or {}
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        # tokens before the end token, as hf counts them (a server's usage counts the EOS it stopped on)
        stops = sum(c.get("finish_reason") == "stop" for c in choices)
        per_choice = max(0, (usage.get("completion_tokens") or 0) - stops) // max(1, len(choices))
        return [Completion(c["message"].get("content") or "", per_choice,
                           "length" if c.get("finish_reason") == "length" else "stop",
                           usage.get("prompt_tokens") or 0) for c in choices]

    def generate(self, requests: Sequence[Request], done: Done = None) -> list[list[Completion]]:
        """The requests on ``concurrency`` daemon threads; answers in request order, ``done`` called in this thread
        as each arrives. A stop (an exception here, e.g. a signal's) leaves the requests in flight to the threads
        (they do not hold the process) and sends no more."""
        out: list[list[Completion]] = [[] for _ in requests]
        answers: queue.Queue = queue.Queue()
        todo = list(enumerate(requests))[::-1]
        lock, stopping = threading.Lock(), threading.Event()

        def work() -> None:
            while not stopping.is_set():
                with lock:
                    if not todo:
                        return
                    i, request = todo.pop()
                try:
                    answers.put((i, self.one(request), None))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                    answers.put((i, None, exc))

        for _ in range(min(self.concurrency, len(requests))):
            threading.Thread(target=work, daemon=True).start()
        try:
            for _ in requests:
                i, completions, exc = answers.get()
                if exc is not None:
                    raise exc
                out[i] = completions
                if done:
                    done(i, completions)
        finally:
            stopping.set()
        return out

    def close(self) -> None:
        pass
