"""How pages are transcribed: one pass (``single``), or olmOCR's pipeline (``olmocr-pipeline``).

``olmocr-pipeline`` follows olmOCR's ``process_page`` (``olmocr/pipeline.py``; docs/evaluate.md maps each step to
its lines): attempt ``a`` samples at ``TEMPERATURE_BY_ATTEMPT[min(a, 7)]``; an answer is usable when its front
matter parses, it stopped on an end token (not the length cap) and prompt + answer fit the model's context; a
usable answer whose front matter says the rotation is invalid sends the page round again re-rendered with the
rotation it names (cumulative); after ``max_attempts`` the last usable answer is kept even with an invalid
rotation, and failing that the page's text comes from the PDF's own text layer.
"""

from __future__ import annotations

from collections import Counter
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


def describe(completions: Sequence[Completion]) -> str:
    """A page's progress note: tokens per repeat, how many hit the cap or failed."""
    capped = sum(c.finish == "length" for c in completions)
    failed = sum(c.finish == "error" for c in completions)
    return ("+".join(str(c.tokens) for c in completions) + " tokens" + (f", {capped} hit the cap" if capped else "")
            + (f", {failed} failed" if failed else ""))


# --- single ----------------------------------------------------------------------------------------


def run_single(backend, items: Sequence[dict], keys: Sequence[str], *, num_samples: int, temperature: float,
               max_tokens: int, seed: int, chunk: int, page_done: Callable[[int, str], None]) -> list[list[Transcription]]:
    """One request per page for its K transcriptions, seeded from ``seed`` and the page's name."""
    out: list[list[Transcription]] = []
    for start in range(0, len(items), chunk):
        part = range(start, min(start + chunk, len(items)))
        requests = [Request(keys[i], items[i]["prompt"], items[i]["image"], temperature, max_tokens,
                            batch_seed(seed, keys[i]), num_samples, items[i]) for i in part]
        answers = backend.generate(requests, done=lambda i, done, base=start: page_done(base + i, describe(done)))
        for completions in answers:
            out.append([Transcription("" if c.finish == "error" else strip_front_matter(c.text), c.tokens, c.finish,
                                      outcome="error" if c.finish == "error" else "answer") for c in completions])
    return out


# --- olmocr-pipeline -------------------------------------------------------------------------------


class PageAttempts:
    """olmOCR's ``process_page`` for one repeat of one page, as a state machine: :meth:`request` gives the next
    attempt's request, :meth:`feed` takes its answer; ``result`` is set when the page is done."""

    def __init__(self, key: str, item: dict, *, repeat: int, max_attempts: int, max_tokens: int, seed: int):
        self.key, self.item, self.repeat = key, item, repeat
        self.max_attempts, self.max_tokens, self.seed = max_attempts, max_tokens, seed
        self.attempt, self.rotation, self.rotation_path = 0, 0, False
        self.last = None  # the last answer: (PageResponse or None, usable, completion, its image's rotation)
        self.causes: list[str] = []
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
        self.result = Transcription(pdf_text, 0, "fallback", self.attempt, self.causes, 0, "fallback")

    def _finish(self, response, completion: Completion, outcome: str, attempts: int, rotation: int) -> None:
        self.result = Transcription(response.natural_text or "", completion.tokens, completion.finish, attempts,
                                    self.causes, rotation, outcome)


def run_pipeline(backend, items: Sequence[dict], keys: Sequence[str], *, num_samples: int, max_attempts: int,
                 max_tokens: int, seed: int, page_done: Callable[[int, str], None]) -> list[list[Transcription]]:
    """Every page's K repeats through :class:`PageAttempts`; each round sends the pending pages' next attempts to
    the backend together (so an engine or server batches them)."""
    states = [[PageAttempts(keys[i], items[i], repeat=k, max_attempts=max_attempts, max_tokens=max_tokens, seed=seed)
               for k in range(1, num_samples + 1)] for i in range(len(items))]
    reported: set[int] = set()
    while True:
        pending = [(i, state) for i, page in enumerate(states) for state in page if state.result is None]
        if not pending:
            break
        answers = backend.generate([state.request() for _, state in pending])
        for (i, state), completions in zip(pending, answers):
            state.feed(completions[0])
        for i, page in enumerate(states):
            if i not in reported and all(state.result is not None for state in page):
                reported.add(i)
                page_done(i, ", ".join(f"{t.outcome} after {t.attempts} attempt(s)" for t in (s.result for s in page)))
    return [[state.result for state in page] for page in states]


def protocol_counts(transcriptions: Sequence[Sequence[Transcription]], max_attempts: int) -> dict:
    """The pipeline's report: transcriptions finished per attempt, retry causes, rotations, kept invalid
    rotations, fallbacks."""
    flat = [t for page in transcriptions for t in page]
    answered = [t for t in flat if t.outcome in ("answer", "kept-invalid-rotation")]
    per_attempt = Counter(t.attempts for t in answered)
    return {
        "max_attempts": max_attempts,
        "temperature_by_attempt": list(TEMPERATURE_BY_ATTEMPT),
        "finished_on_attempt": {str(a): per_attempt.get(a, 0) for a in range(1, max_attempts + 1)},
        "retry_causes": dict(sorted(Counter(cause for t in flat for cause in t.causes).items())),
        "rotated": sum(t.rotation != 0 for t in answered),
        "kept_invalid_rotation": sum(t.outcome == "kept-invalid-rotation" for t in flat),
        "fallbacks": sum(t.outcome == "fallback" for t in flat),
        "transcriptions": len(flat),
    }
