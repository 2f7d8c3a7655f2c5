"""olmocr_rl.evaluate's pieces: page names and filters, output layout, sampling settings, front matter, batched
and seeded transcription on the tiny model (the CLI end to end: tests/integration/test_evaluate_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmocr_rl.evaluate import (
    DEFAULT_SAMPLING_TEMPERATURE,
    EvaluateError,
    compile_page_regex,
    generation_config,
    output_path,
    page_key,
    resolve_sampling,
    select_pages,
    strip_front_matter,
    transcribe_batch,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "bench_data_sample"
FRONT_MATTER = "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\nis_diagram: False\n---\n"


# ------------------------------------------------------------------------------------ pure pieces


def test_page_names_and_selection():
    keys = [page_key("blank.pdf", 1), page_key("counting.pdf", 1), page_key("counting.pdf", 2), page_key("synth/doc.pdf", 1)]
    assert keys == ["blank.pdf:1", "counting.pdf:1", "counting.pdf:2", "synth/doc.pdf:1"]
    regex = lambda p: compile_page_regex("--pages", p)  # noqa: E731
    assert select_pages(keys, None, None) == [0, 1, 2, 3]
    assert select_pages(keys, regex("counting"), None) == [1, 2]
    assert select_pages(keys, regex(r"^counting\.pdf:2$"), None) == [2]
    assert select_pages(keys, None, regex("counting")) == [0, 3]
    assert select_pages(keys, regex("counting|synth/"), regex(":2$")) == [1, 3]
    assert select_pages(keys, regex("nothing"), None) == []
    with pytest.raises(EvaluateError, match=r"--pages '\(' is not a valid regular expression"):
        compile_page_regex("--pages", "(")


def test_output_path_follows_bench_layout(tmp_path):
    assert output_path(tmp_path, "counting.pdf", 2, 1) == tmp_path / "counting_pg2_repeat1.md"
    assert output_path(tmp_path, "synth/doc0042_page3.pdf", 1, 3) == tmp_path / "synth" / "doc0042_page3_pg1_repeat3.md"
    # olmOCR-bench's rule is applied literally: a PDF named *_pg1 keeps its own suffix.
    assert output_path(tmp_path, "blank_book_pg1.pdf", 1, 1) == tmp_path / "blank_book_pg1_pg1_repeat1.md"
    with pytest.raises(ValueError):
        output_path(tmp_path, "a.pdf", 1, 0)


def test_resolve_sampling():
    greedy = resolve_sampling(1, None)
    assert (greedy.do_sample, greedy.temperature) == (False, 0.0)
    assert resolve_sampling(1, 0.0).do_sample is False
    several = resolve_sampling(3, None)
    assert (several.num_samples, several.do_sample, several.temperature) == (3, True, DEFAULT_SAMPLING_TEMPERATURE)
    one_sampled = resolve_sampling(1, 0.5)
    assert (one_sampled.do_sample, one_sampled.temperature) == (True, 0.5)
    for k, t, message in [(2, 0.0, "identical greedy"), (0, None, "--num_samples"), (1, -0.1, "--temperature"),
                          (1, float("nan"), "--temperature")]:
        with pytest.raises(EvaluateError, match=message):
            resolve_sampling(k, t)


def test_strip_front_matter():
    assert strip_front_matter(FRONT_MATTER + "Hello\n\nworld\n") == "Hello\n\nworld"
    assert strip_front_matter("no front matter here\n") == "no front matter here"
    # An unparseable block stays, as page text (olmOCR treats it so).
    assert strip_front_matter("---\n: [\n---\nText") == "---\n: [\n---\nText"


def test_scoring_rule_is_named_and_olmocr_bench_drops_the_near_empty_guard(tmp_path, capsys):
    """The near-empty example under both rules, through evaluate's scorer: one character vs a present test of the
    43-char sentence "The quick brown fox jumps over the lazy dog" (counting.pdf has no such text: a new page)."""
    import json as json_module

    from olmocr_rl.evaluate import format_result, main, score_outputs

    bench, outputs = tmp_path / "bench", tmp_path / "out"
    bench.mkdir()
    outputs.mkdir()
    sentence = "The quick brown fox jumps over the lazy dog"
    tests = [{"pdf": "doc.pdf", "page": 1, "id": "there", "type": "present", "text": sentence},
             {"pdf": "doc.pdf", "page": 1, "id": "gone", "type": "absent", "text": sentence}]
    (bench / "t.jsonl").write_text("\n".join(json_module.dumps(t) for t in tests) + "\n")
    (outputs / "doc_pg1_repeat1.md").write_text("a")
    ours = score_outputs(bench, outputs)  # the default
    theirs = score_outputs(bench, outputs, scoring="olmocr-bench")
    assert ours["scoring"] == "olmocr-rl" and theirs["scoring"] == "olmocr-bench"
    assert {k: v["passed"] for k, v in ours["tests"].items()} == {"there": False, "gone": True, "doc.pdf_baseline": True}
    assert {k: v["passed"] for k, v in theirs["tests"].items()} == {"there": True, "gone": False, "doc.pdf_baseline": True}
    report = format_result({**ours, "model": "m", "bench": str(bench), "outputs": str(outputs), "pages": ["doc.pdf:1"],
                            "sampling": {"num_samples": 1, "do_sample": False, "temperature": 0.0, "max_new_tokens": 8},
                            "capped_samples": 0})
    assert "scoring olmocr-rl (this project's" in report
    with pytest.raises(EvaluateError, match="--scoring 'olmocr' is not a scoring rule; choose one of olmocr-rl"):
        score_outputs(bench, outputs, scoring="olmocr")
    # The CLI refuses an unknown rule with one error line naming the choices, before any model is loaded.
    assert main(["--model", str(tmp_path / "no-model"), "--bench", str(bench), "--scoring", "olmocr"]) == 2
    assert capsys.readouterr().err.strip() == ("python -m olmocr_rl.evaluate: error: argument --scoring: invalid choice: "
                                               "'olmocr' (choose from 'olmocr-rl', 'olmocr-bench')")


# ------------------------------------------------------------------------------- generation


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(str(tiny_model_dir))
    assert processor.tokenizer.padding_side == "right"  # transcribe_batch must pad left by itself
    return model, processor


def _items():
    from olmocr_rl.data.dataset import OlmOCRBenchDataset

    dataset = OlmOCRBenchDataset(SAMPLE, jsonl_filter="basic")
    short, long = dataset[0], dataset[1]
    # A longer prompt than its batch neighbour, so the batch needs padding.
    long["prompt"][0]["content"][0]["text"] = "Transcribe this page. " * 5 + long["prompt"][0]["content"][0]["text"]
    return short, long


def test_batched_greedy_equals_one_page_at_a_time(tiny):
    """Left padding: a padded batch transcribes each page exactly as it would alone."""
    model, processor = tiny
    config = generation_config(model, processor, resolve_sampling(1, None), 6)
    short, long = _items()
    batched = transcribe_batch(model, processor, [short, long], config, seed=0)
    alone = [transcribe_batch(model, processor, [item], config, seed=0)[0] for item in (short, long)]
    assert batched == alone
    assert [len(samples) for samples in batched] == [1, 1]
    assert all(tokens <= 6 for samples in batched for _, tokens, _ in samples)


def test_sampling_is_seeded(tiny):
    model, processor = tiny
    config = generation_config(model, processor, resolve_sampling(3, 1.0), 8)
    short, _ = _items()
    first = transcribe_batch(model, processor, [short], config, seed=1)
    assert transcribe_batch(model, processor, [short], config, seed=1) == first
    assert transcribe_batch(model, processor, [short], config, seed=2) != first
    assert len(first[0]) == 3
    # The checkpoint's own decoding defaults do not leak in: plain temperature sampling.
    assert (config.top_k, config.top_p, config.repetition_penalty, config.temperature) == (0, 1.0, 1.0, 1.0)


# ------------------------------------------------------------------------------ end to end


# ------------------------------------------------------------------------------------- errors




def test_the_cpu_kv_cache_is_what_the_pages_need_within_the_free_memory(tiny_model_dir, monkeypatch):
    """The tiny model: 2 layers x 2 KV heads x 32 dims x K and V x 4 bytes (fp32) = 1,024 bytes a token."""
    from olmocr_rl.evaluate import BackendFlags
    from olmocr_rl.evaluation.engine_memory import BLOCK_TOKENS, GIB, kv_cache_bytes

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    flags = BackendFlags(backend="vllm", vllm_max_model_len=16384)
    common = dict(repeats=2, max_new_tokens=3000, image_dim=1288, chunk_pages=64, cuda=False)
    size, line = kv_cache_bytes(str(tiny_model_dir), flags, pages=10, free=16 * GIB, **common)
    sequence = 46 * 46 + 512 + 3000  # image tokens of a 1288 px square page + prompt text + answer
    need = 10 * 2 * -(-sequence // BLOCK_TOKENS) * BLOCK_TOKENS * 1024
    assert size == -(-need // 2**20) * 2**20 and size < GIB  # not 90 % of the machine
    assert "vLLM KV cache on CPU: 0.11 GiB (20 sequence(s) in flight of up to 5,628 tokens, 1,024 bytes a token" in line
    # at least one --vllm_max_model_len sequence (vLLM refuses to start with less)
    one, _ = kv_cache_bytes(str(tiny_model_dir), flags, pages=1, free=16 * GIB, **{**common, "repeats": 1,
                                                                                    "max_new_tokens": 10})
    assert one >= 16384 * 1024
    # at most half the free memory; a sequence that cannot fit is one line
    capped, _ = kv_cache_bytes(str(tiny_model_dir), flags, pages=1000, free=256 * 2**20, **common)
    assert capped <= 128 * 2**20
    with pytest.raises(EvaluateError, match=r"--backend vllm: one 16,384-token sequence needs 0.02 GiB of KV cache"):
        kv_cache_bytes(str(tiny_model_dir), flags, pages=1, free=8 * 2**20, **common)
    # the flag sets it (on a GPU too); VLLM_CPU_KVCACHE_SPACE wins on CPU; a GPU keeps vLLM's own sizing
    assert kv_cache_bytes(str(tiny_model_dir), BackendFlags(backend="vllm", vllm_kv_cache_gib=1.5), pages=1,
                          **{**common, "cuda": True})[0] == int(1.5 * GIB)
    assert kv_cache_bytes(str(tiny_model_dir), flags, pages=1, **{**common, "cuda": True}) == (None, "")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    size, line = kv_cache_bytes(str(tiny_model_dir), flags, pages=1, **common)
    assert size is None and "2 GiB (VLLM_CPU_KVCACHE_SPACE in the environment" in line
