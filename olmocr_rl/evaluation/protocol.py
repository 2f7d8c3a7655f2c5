"""How pages are transcribed: one pass (``single``), or olmOCR's pipeline (``olmocr-pipeline``).

``olmocr-pipeline`` follows olmOCR's ``process_page`` (``olmocr/pipeline.py``; docs/evaluate.md maps each step to
its lines): attempt ``a`` samples at ``TEMPERATURE_BY_ATTEMPT[min(a, 7)]``; an answer is usable when its front
matter parses, it stopped on an end token (not the length cap) and prompt + answer fit the model's context; a
usable answer whose front matter says the rotation is invalid sends the page round again re-rendered with the
rotation it names (cumulative); after ``max_attempts`` the last usable answer is kept even with an invalid
rotation, and failing that the page's text comes from the PDF's own text layer.

Every transcription records what produced its text (``outcome``: the model's answer, its last answer kept with an
invalid rotation, the text-layer fallback, a failed request) and the text the model-only score reads
(``model_text``): the same text, except for a fallback, where it is the model's last usable answer (parsed front
matter, stopped on an end token, within the context; ``model_attempt`` says which) or empty when there was none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from olmocr_rl.evaluation.common import Completion, Request, batch_seed, strip_front_matter

PROTOCOLS = ("single", "olmocr-pipeline")
#: olmOCR's ``TEMPERATURE_BY_ATTEMPT``: the temperature of attempt a is entry min(a, 7).
TEMPERATURE_BY_ATTEMPT = (0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0)
#: olmOCR's ``--max_page_retries`` default: attempts per page.
DEFAULT_MAX_ATTEMPTS = 8
#: olmOCR's ``MODEL_MAX_CONTEXT``: an answer whose prompt + completion tokens exceed it is not used.
MODEL_MAX_CONTEXT = 16384
#: olmOCR's ``MAX_TOKENS`` per request in ``build_page_query``: the pipeline's default --max_new_tokens.
PIPELINE_MAX_TOKENS = 8000


@dataclass
class Transcription:
    """What is written for one repeat of one page, and how it came about."""

    text: str  # front matter removed
    tokens: int = 0
    finish: str = "stop"  # stop / length / error (single); the accepted answer's (pipeline)
    attempts: int = 1
    causes: list[str] = field(default_factory=list)  # why each failed attempt failed (pipeline)
    rotation: int = 0  # the rotation of the image the accepted answer read
    outcome: str = "answer"  # answer / kept-invalid-rotation / fallback / error
    model_text: str | None = None  # what the model-only score reads, where it differs from text (a fallback)
    model_attempt: int = 0  # the attempt (1-based) of the answer model_text is; 0: none (empty)
    failed_requests: int = 0  # attempts whose request failed (pipeline), or 1 for a failed single request
    error: str = ""  # the last failed request's reason

    @property
    def model_only_text(self) -> str:
        return self.text if self.model_text is None else self.model_text

    def record(self) -> dict:
        """What a page record keeps of it (the texts are in the transcription files)."""
        return {"outcome": self.outcome, "attempts": self.attempts, "tokens": self.tokens, "finish": self.finish,
                "causes": list(self.causes), "rotation": self.rotation, "failed_requests": self.failed_requests,
                "model_only": "same" if self.model_text is None else ("answer" if self.model_attempt else "empty"),
                "model_attempt": self.model_attempt, **({"error": self.error} if self.error else {})}


def rotate(image, degrees: int):
    """The page image turned as olmOCR turns it (PIL's ``ROTATE_90`` etc.: counter-clockwise)."""
    from PIL import Image

    turns = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}
    return image.transpose(turns[degrees]) if degrees else image


def text_layer(pdf_path: str, page: int) -> str:
    """The PDF page's own text (pypdfium2's text layer; olmOCR runs poppler's ``pdftotext`` here)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(str(pdf_path))
    try:
        text_page = document[page - 1].get_textpage()
        return text_page.get_text_range().replace("\r\n", "\n").strip()
    finally:
        document.close()


# --- single ----------------------------------------------------------------------------------------

PageDone = Callable[[int, list[Transcription]], None]


def run_single(backend, items: Sequence[dict], keys: Sequence[str], *, num_samples: int, temperature: float,
               max_tokens: int, seed: int, page_done: PageDone) -> None:
    """One request per page for its K transcriptions, seeded from ``seed`` and the page's name; ``page_done(i,
    transcriptions)`` as each page's request is answered."""
    requests = [Request(keys[i], items[i]["prompt"], items[i]["image"], temperature, max_tokens,
                        batch_seed(seed, keys[i]), num_samples, items[i]) for i in range(len(items))]

    def done(i: int, completions: list[Completion]) -> None:
        page_done(i, [Transcription("" if c.finish == "error" else strip_front_matter(c.text), c.tokens, c.finish,
                                    outcome="error" if c.finish == "error" else "answer",
                                    failed_requests=int(c.finish == "error"),
                                    error=c.text if c.finish == "error" else "") for c in completions])

    backend.generate(requests, done=done)


# --- olmocr-pipeline -------------------------------------------------------------------------------


class PageAttempts:
    """olmOCR's ``process_page`` for one repeat of one page, as a state machine: :meth:`request` gives the next
    attempt's request, :meth:`feed` takes its answer; ``result`` is set when the page is done."""

    def __init__(self, key: str, item: dict, *, repeat: int, max_attempts: int, max_tokens: int, seed: int):
        self.key, self.item, self.repeat = key, item, repeat
        self.max_attempts, self.max_tokens, self.seed = max_attempts, max_tokens, seed
        self.attempt, self.rotation, self.rotation_path = 0, 0, False
        self.last = None  # the last answer: (PageResponse or None, usable, completion, its image's rotation)
        self.last_usable = None  # the last usable answer (any rotation): (PageResponse, attempt 1-based)
        self.causes: list[str] = []
        self.failed_requests, self.error = 0, ""
        self.result: Transcription | None = None

    def request(self) -> Request:
        temperature = TEMPERATURE_BY_ATTEMPT[min(self.attempt, len(TEMPERATURE_BY_ATTEMPT) - 1)]
        seed = batch_seed(self.seed, f"{self.key}#repeat{self.repeat}#attempt{self.attempt}")
        return Request(self.key, self.item["prompt"], rotate(self.item["image"], self.rotation), temperature,
                       self.max_tokens, seed, 1, self.item)

    @staticmethod
    def judge(completion: Completion):
        """``(PageResponse or None, usable, cause)``: a failed request or a front matter that does not parse
        gives no response; a response is unusable when it stopped at the cap or overflowed the context."""
        from olmocr_rl.data.front_matter import FrontMatterError, parse_page_response

        if completion.finish == "error":
            return None, False, "request error"
        try:
            response = parse_page_response(completion.text)
        except FrontMatterError:
            return None, False, "front matter"
        if completion.finish == "length":
            return response, False, "length"
        if completion.prompt_tokens + completion.tokens > MODEL_MAX_CONTEXT:
            return response, False, "context"
        return response, True, None if response.is_rotation_valid else "rotation"

    def feed(self, completion: Completion) -> None:
        response, usable, cause = self.judge(completion)
        read = self.rotation  # the rotation of the image this answer read
        if completion.finish == "error":
            self.failed_requests += 1
            self.error = completion.text
        if usable:
            self.last_usable = (response, self.attempt + 1)
        if usable and response.is_rotation_valid:
            self._finish(response, completion, "answer", self.attempt + 1, read)
            return
        self.causes.append(cause)
        if self.attempt == 0 and response is not None and not response.is_rotation_valid:
            self.rotation_path = True  # the first answer picks the path: rotation feedback, or plain retries
            self.rotation = response.rotation_correction % 360
        elif self.attempt > 0 and self.rotation_path and response is not None:
            self.rotation = (self.rotation + response.rotation_correction) % 360
        self.last = (response, usable, completion, read)
        self.attempt += 1
        if self.attempt < self.max_attempts:
            return
        response, usable, completion, read = self.last
        if response is not None and usable:  # a usable answer, only its rotation judged invalid
            self._finish(response, completion, "kept-invalid-rotation", self.attempt, read)
            return
        pdf_text = text_layer(self.item["pdf_path"], self.item["page"])
        model_text, model_attempt = ((self.last_usable[0].natural_text or "", self.last_usable[1])
                                     if self.last_usable else ("", 0))
        self.result = Transcription(pdf_text, 0, "fallback", self.attempt, self.causes, 0, "fallback", model_text,
                                    model_attempt, self.failed_requests, self.error)

    def _finish(self, response, completion: Completion, outcome: str, attempts: int, rotation: int) -> None:
        self.result = Transcription(response.natural_text or "", completion.tokens, completion.finish, attempts,
                                    self.causes, rotation, outcome, failed_requests=self.failed_requests,
                                    error=self.error)


def run_pipeline(backend, items: Sequence[dict], keys: Sequence[str], *, num_samples: int, max_attempts: int,
                 max_tokens: int, seed: int, page_done: PageDone, progress=None) -> None:
    """Every page's K repeats through :class:`PageAttempts`; each round sends the pending pages' next attempts to
    the backend together (so an engine or server batches them). Each answer is fed as it arrives, and
    ``page_done(i, transcriptions)`` called as soon as page i's K repeats are done; ``progress`` (a
    :class:`~olmocr_rl.evaluation.progress.Progress`) hears of each round and attempt."""
    states = [[PageAttempts(keys[i], items[i], repeat=k, max_attempts=max_attempts, max_tokens=max_tokens, seed=seed)
               for k in range(1, num_samples + 1)] for i in range(len(items))]
    while True:
        pending = [(i, state) for i, page in enumerate(states) for state in page if state.result is None]
        if not pending:
            return
        if progress is not None:
            progress.start_round({(i, state.repeat): state.attempt for i, state in pending})
        finished = []

        def done(j: int, completions: list[Completion], pending=pending, finished=finished) -> None:
            i, state = pending[j]
            state.feed(completions[0])
            if progress is not None:
                progress.attempt_done((i, state.repeat), state.result is not None)
            if state.result is not None:
                finished.append(i)
                if all(other.result is not None for other in states[i]):
                    page_done(i, [other.result for other in states[i]])

        backend.generate([state.request() for _, state in pending], done=done)
        if progress is not None:
            progress.round_done(len(pending), len(finished))
