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
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

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
                 enforce_eager: bool = False, llm=None):
        from transformers import AutoProcessor

        from olmocr_rl.config.grpo import vision_pad_tokens

        if llm is None:
            from vllm import LLM

            llm = LLM(model=model, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                      data_parallel_size=data_parallel_size, max_model_len=max_model_len,
                      gpu_memory_utilization=gpu_memory_utilization, seed=seed, enforce_eager=enforce_eager,
                      limit_mm_per_prompt={"image": 1})
        self.llm = llm
        self.processor = AutoProcessor.from_pretrained(model)
        self.bad_words = vision_pad_tokens(self.processor.tokenizer)
        self._prompts: dict[str, str] = {}

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
        prompts = [{"prompt": self.prompt_text(r.messages), "multi_modal_data": {"image": r.image}} for r in requests]
        outputs = self.llm.generate(prompts, [self.sampling_params(r) for r in requests], use_tqdm=False)
        out = []
        for i, output in enumerate(outputs):
            prompt_tokens = len(output.prompt_token_ids or [])
            # tokens before the end token, as hf counts them (vLLM's token_ids end with the EOS it stopped on)
            out.append([Completion(c.text, len(c.token_ids) - (c.finish_reason == "stop" and c.stop_reason is None),
                                   "length" if c.finish_reason == "length" else "stop", prompt_tokens)
                        for c in output.outputs])
            if done:
                done(i, out[-1])
        return out

    def close(self) -> None:
        """Free the engine (its KV cache and weights) now rather than at the next garbage collection."""
        import gc

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
    (counted in the report), not an exception."""

    name = "server"

    def __init__(self, url: str, model: str, *, concurrency: int = 8, timeout: float = 600.0, retries: int = 3,
                 backoff_s: float = 2.0, api_key: str | None = None):
        base = url.rstrip("/")
        self.base = base[: -len("/v1")] if base.endswith("/v1") else base
        self.model, self.concurrency, self.timeout = model, concurrency, timeout
        self.retries, self.backoff_s, self.api_key = retries, backoff_s, api_key
        self.failures: list[str] = []

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
                served = [entry.get("id") for entry in json.loads(response.read()).get("data", [])]
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise EvaluateError(f"--server_url {self.base}: cannot reach GET {url} ({reason}); start an "
                                "OpenAI-compatible server there (e.g. `vllm serve MODEL`) or fix the URL") from None
        if self.model not in served:
            raise EvaluateError(f"--server_model {self.model!r}: the server at {self.base} serves "
                                f"{', '.join(map(repr, served)) or 'no model'}; pass one of them")

    def body(self, request: Request) -> dict:
        """The chat-completions request: the page's prompt and image, plain decoding (vLLM's extra fields
        ``top_k``, ``repetition_penalty``, ``bad_words`` and ``skip_special_tokens`` included)."""
        from olmocr_rl.config.grpo import VISION_PAD_TOKENS

        return {
            "model": self.model, "messages": _openai_messages(request.messages, request.image),
            "max_tokens": request.max_tokens, "temperature": request.temperature, "top_p": 1.0, "top_k": -1,
            "repetition_penalty": 1.0, "n": request.n, "seed": request.seed, "bad_words": list(VISION_PAD_TOKENS),
            "skip_special_tokens": True,
        }

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
        out: list[list[Completion]] = [[] for _ in requests]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self.one, request): i for i, request in enumerate(requests)}
            for future in as_completed(futures):  # results kept in request order; progress as each finishes
                out[futures[future]] = future.result()
                if done:
                    done(futures[future], out[futures[future]])
        return out

    def close(self) -> None:
        pass
