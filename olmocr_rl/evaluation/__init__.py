"""The pieces behind ``python -m olmocr_rl.evaluate``: transcription backends (Hugging Face ``generate``, vLLM's
offline engine, an OpenAI-compatible server), the protocols that drive them (one pass, or olmOCR's pipeline with
its retries, rotation correction and text-layer fallback), the evaluation folder, and ``--compare``.

docs/evaluate.md describes each; the command itself (flags, report) is :mod:`olmocr_rl.evaluate`.
"""
