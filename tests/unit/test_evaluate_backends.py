"""``python -m olmocr_rl.evaluate --backend server`` and ``--protocol olmocr-pipeline`` against a stand-in
OpenAI-compatible server on loopback (tests/openai_standin.py), in this process: the request it gets, bounded
concurrency, retries with backoff, a page that times out, every branch of olmOCR's pipeline (bad front matter,
a length stop, a rotation with the page re-rendered, an invalid rotation kept, the text-layer fallback), the
evaluation folder written whole or not at all, and the one-line errors before anything loads."""

from __future__ import annotations

import json
import socket
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from olmocr_rl.evaluate import BackendFlags, evaluate, format_result, main
from olmocr_rl.evaluation.backends import ServerBackend
from olmocr_rl.evaluation.protocol import TEMPERATURE_BY_ATTEMPT, rotate, text_layer
from openai_standin import pixels, standin_server

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "bench_data_sample"
FRONT = "---\nprimary_language: en\nis_rotation_valid: {valid}\nrotation_correction: {turn}\nis_table: False\nis_diagram: False\n---\n"
PIPELINE_PAGES = r"^(counting\.pdf:1|simple_lines|table|paragraphs|two_columns|equations)"


@pytest.fixture(scope="module")
def pages():
    """Page name -> (reference markdown, {pixels of the image turned by r: r}, pdf path)."""
    from olmocr_rl.data.dataset import OlmOCRBenchDataset, page_key

    dataset = OlmOCRBenchDataset(str(SAMPLE))
    out = {}
    for i, sample in enumerate(dataset.samples):
        item = dataset[i]
        out[page_key(sample["pdf"], sample["page"])] = (
            item["claude_original"], {pixels(rotate(item["image"], r)): r for r in (0, 90, 180, 270)}, item["pdf_path"])
    return out


def identify(pages, image):
    """(page name, rotation) of the image a request carries."""
    found = pixels(image)
    for key, (_, turns, _) in pages.items():
        if found in turns:
            return key, turns[found]
    raise AssertionError("the server got an image that is no page of the sample")


def backend(url, **kwargs):
    return ServerBackend(url, "standin", backoff_s=0.01, **{"concurrency": 2, **kwargs})


def test_server_single_pass_sends_the_page_and_scores_the_answers(pages, tmp_path):
    """Each page's own image reaches the server (PNG, lossless), plain decoding; the reference answers score 1.0;
    at most --server_concurrency requests in flight; a 503 is retried after a backoff."""
    failed_once = set()

    def answer(seen):
        key, turn = identify(pages, seen.image)
        if key == "counting.pdf:1" and key not in failed_once:
            failed_once.add(key)
            return {"status": 503}
        return {"content": pages[key][0], "sleep": 0.4}  # long enough for two to overlap on a loaded machine

    with standin_server(answer) as (url, state):
        result = evaluate("standin", SAMPLE, outputs=tmp_path / "out", pages=r"^(counting|simple_lines|table)",
                          flags=BackendFlags(backend="server", server_url=url), backend=backend(url))
    first = state.seen[0].body
    assert (first["temperature"], first["top_p"], first["top_k"], first["repetition_penalty"], first["n"]) == (
        0.0, 1.0, -1, 1.0, 1)
    assert first["bad_words"] == ["<|image_pad|>", "<|video_pad|>"] and first["max_tokens"] == 3000
    assert [p["type"] for p in first["messages"][0]["content"]] == ["text", "image_url"]
    assert len(state.seen) == 4 + 1 and state.max_in_flight == 2  # 4 pages, one retried; concurrency 2
    assert result["overall_pass_rate"] == 1.0 and result["failed_requests"] == 0
    assert result["backend"] == "server" and result["server_model"] == "standin"
    summary = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert summary["pages"] == ["counting.pdf:1", "counting.pdf:2", "simple_lines.pdf:1", "table.pdf:1"]


@pytest.mark.slow  # waits out two 1.5 s timeouts
def test_a_page_that_times_out_and_answers_at_the_cap_are_counted_not_fatal(pages, tmp_path):
    def answer(seen):
        key, _ = identify(pages, seen.image)
        if key == "counting.pdf:2":
            return {"content": "late", "sleep": 6.0}
        return {"content": pages[key][0], "finish_reason": "length" if key == "table.pdf:1" else "stop"}

    with standin_server(answer) as (url, state):
        result = evaluate("standin", SAMPLE, outputs=tmp_path / "out", pages=r"^(counting|table)",
                          flags=BackendFlags(backend="server", server_url=url),
                          backend=backend(url, timeout=1.5, retries=1))  # margin for a loaded machine
    assert result["failed_requests"] == 1 and result["capped_samples"] == 1
    assert sum(key == "counting.pdf:2" for key, _ in (identify(pages, s.image) for s in state.seen)) == 2
    assert [m for m in result["missing_outputs"] if "counting_pg2" in m] == result["missing_outputs"] != []
    assert not (tmp_path / "out" / "counting_pg2_repeat1.md").exists()
    assert (tmp_path / "out" / "table_pg1_repeat1.md").is_file()  # a length stop is still written (single)


def test_pipeline_follows_olmocr_through_every_branch(pages, tmp_path, capsys):
    """counting.pdf:1 answers bad front matter once, simple_lines stops at the length cap once, table says its
    rotation is invalid (90) and is then read re-rendered turned by 90, two_columns always says 90 (kept after 8
    attempts with an invalid rotation), paragraphs never answers usably (text-layer fallback, empty for the
    model-only score), equations answers usably but turned on its first attempt and never usably after (text-layer
    fallback; the model-only score reads that first answer)."""
    attempts: dict = defaultdict(list)

    def answer(seen):
        key, turn = identify(pages, seen.image)
        attempts[key].append((seen.temperature, turn))
        reference = pages[key][0].split("\n---\n", 1)[1]
        good = FRONT.format(valid=True, turn=0) + reference
        n = len(attempts[key])
        if key == "counting.pdf:1":
            return {"content": "no front matter at all" if n == 1 else good}
        if key == "simple_lines.pdf:1":
            return {"content": good, "finish_reason": "length" if n == 1 else "stop"}
        if key == "table.pdf:1":
            return {"content": FRONT.format(valid=False, turn=90) + "sideways" if turn == 0 else good}
        if key == "two_columns.pdf:1":
            return {"content": FRONT.format(valid=False, turn=90) + f"turned {turn}"}
        if key == "equations.pdf:1" and n == 1:
            return {"content": FRONT.format(valid=False, turn=180) + reference}
        return {"content": "---\nnot: yaml: at all\n---\ngarbage"}

    with standin_server(answer) as (url, state):
        result = evaluate("standin", SAMPLE, outputs=tmp_path / "out", pages=PIPELINE_PAGES,
                          flags=BackendFlags(backend="server", protocol="olmocr-pipeline", server_url=url),
                          backend=backend(url, concurrency=4))
    counts = result["pipeline"]
    print("pipeline branch counts:", json.dumps(counts))
    assert counts["finished_on_attempt"] == {"1": 0, "2": 3, "3": 0, "4": 0, "5": 0, "6": 0, "7": 0, "8": 1}
    assert counts["retry_causes"] == {"front matter": 1 + 8 + 7, "length": 1, "rotation": 1 + 8 + 1}
    assert (counts["rotated"], counts["kept_invalid_rotation"], counts["fallbacks"]) == (2, 1, 2)
    assert counts["fallbacks_scored_as_the_models_last_usable_answer"] == 1
    assert result["transcription_sources"] == {"answer": 3, "kept-invalid-rotation": 1, "fallback": 2, "error": 0}
    assert result["model_only_sources"] == {"answer": 4, "last_usable_answer": 1, "empty": 1, "failed": 0}
    assert result["generated_tokens"] > 0 and result["sampling"]["max_new_tokens"] == 8000
    # olmOCR's temperature per attempt, and the rotation each attempt's image had (cumulative)
    assert [t for t, _ in attempts["paragraphs.pdf:1"]] == list(TEMPERATURE_BY_ATTEMPT)
    assert [r for _, r in attempts["table.pdf:1"]] == [0, 90]
    assert [r for _, r in attempts["two_columns.pdf:1"]] == [0, 90, 180, 270, 0, 90, 180, 270]
    assert [r for _, r in attempts["equations.pdf:1"]] == [0] + [180] * 7
    out = tmp_path / "out"
    for key in ("paragraphs", "equations"):  # the pipeline scores the text layer
        assert (out / f"{key}_pg1_repeat1.md").read_text() == text_layer(pages[f"{key}.pdf:1"][2], 1) != ""
    assert (out / "model_only" / "paragraphs_pg1_repeat1.md").read_text() == ""  # no usable answer: empty
    equations = pages["equations.pdf:1"][0].split("\n---\n", 1)[1].strip()
    assert (out / "model_only" / "equations_pg1_repeat1.md").read_text() == equations  # its usable first answer
    assert (out / "two_columns_pg1_repeat1.md").read_text() == "turned 270"  # the last answer, front matter removed
    assert (out / "model_only" / "two_columns_pg1_repeat1.md").read_text() == "turned 270"
    assert (out / "table_pg1_repeat1.md").read_text() == pages["table.pdf:1"][0].split("\n---\n", 1)[1].strip()
    # both scores, each from the bench scorer on its folder, each page's verdicts in its record
    model_only = json.loads((out / "scores_model_only.json").read_text())
    assert model_only["overall_pass_rate"] == result["model_only"]["overall_pass_rate"] != result["overall_pass_rate"]
    assert not result["model_only"]["same_as_scored"]
    records = {r["page"]: r for r in map(json.loads, (out / "pages.jsonl").read_text().splitlines())}
    assert [r["outcome"] for r in records["equations.pdf:1"]["repeats"]] == ["fallback"]
    assert records["equations.pdf:1"]["repeats"][0]["model_attempt"] == 1
    assert {t: [v["repeat_passes"] > 0] for t, v in model_only["tests"].items() if v["page"] == "paragraphs.pdf:1"} \
        == records["paragraphs.pdf:1"]["model_only_verdicts"]
    report = format_result(result)
    assert "pipeline: 6 transcription(s); finished on attempt 2: 3, 8: 1; retries by cause: front matter 16, " \
           "length 1, rotation 10; rotated 2, kept with an invalid rotation 1, text-layer fallbacks 2" in report
    assert "overall pass rate of the model alone: " in report and "read as its last usable answer (1) or empty (1)" \
        in report
    # progress from the first round on (attempts answered, a rate in attempts/s), one line per round in a log
    err = capsys.readouterr().err.splitlines()
    rounds = [line for line in err if "  round " in line]
    assert len(rounds) == 8 and rounds[0].endswith("round 1: 6 attempt(s), 0 transcription(s) finished")
    assert "0/6 pages, round 1 (1 of up to 8 attempts), 6 attempt(s) answered, " in rounds[0]
    assert err.index(rounds[0]) < min(i for i, line in enumerate(err) if "counting.pdf:1: answer after 2" in line)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _error(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and captured.out == "" and len(lines) == 1, captured.err
    assert lines[0].startswith("python -m olmocr_rl.evaluate: error: ")
    return lines[0]


@pytest.mark.parametrize("extra, expected", [
    (["--backend", "server", "--server_url", "http://127.0.0.1:{port}"], "--server_url http://127.0.0.1:{port}: cannot reach"),
    (["--backend", "server"], "--backend server needs --server_url"),
    (["--backend", "hf", "--server_url", "http://x"], "--server_url is for --backend server"),
    (["--backend", "server", "--server_url", "http://x", "--batch_size", "2"], "--batch_size is for --backend hf"),
    (["--tensor_parallel_size", "2"], "--tensor_parallel_size is for --backend vllm"),
    (["--protocol", "olmocr-pipeline", "--temperature", "0.5"], "--temperature cannot be honoured by --protocol olmocr-pipeline"),
    (["--max_attempts", "3"], "--max_attempts is for --protocol olmocr-pipeline"),
])
def test_bad_backend_flags_are_one_line_before_anything_loads(capsys, tmp_path, extra, expected):
    port = _closed_port()
    line = _error(capsys, "--model", "/no/such/model", "--bench", SAMPLE, "--outputs", tmp_path / "out",
                  *[e.format(port=port) for e in extra])
    assert expected.format(port=port) in line
    assert not (tmp_path / "out").exists()


def test_a_wrong_model_name_on_the_server_names_the_served_ones(capsys, tmp_path):
    with standin_server(lambda seen: {"content": ""}, models=("olmocr", "other")) as (url, state):
        line = _error(capsys, "--model", "mine", "--bench", SAMPLE, "--outputs", tmp_path / "out", "--backend",
                      "server", "--server_url", url + "/v1")
    assert "--server_model 'mine': the server at " in line and "serves 'olmocr', 'other'; pass one of them" in line
    assert state.seen == [] and not (tmp_path / "out").exists()


def test_backend_vllm_without_vllm_is_one_line(capsys, tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    line = _error(capsys, "--model", "/no/such/model", "--bench", SAMPLE, "--backend", "vllm")
    assert "--backend vllm: vLLM is not installed" in line


def test_server_answers_come_back_in_request_order_with_their_seeds():
    """Requests finish in any order under concurrency; the answers are returned in request order."""
    seen = Counter()

    def answer(s):
        seen[s.body["seed"]] += 1
        return {"content": f"x{s.body['seed']}", "sleep": 0.05 * (4 - s.body["seed"])}

    from olmocr_rl.evaluation.common import Request

    with standin_server(answer) as (url, state):
        server = backend(url)
        requests = [Request(f"p{i}", [{"role": "user", "content": [{"type": "text", "text": "t"}]}], None, 0.0, 4, i)
                    for i in range(5)]
        out = server.generate(requests)
    assert [c[0].text for c in out] == [f"x{i}" for i in range(5)] and sorted(seen) == [0, 1, 2, 3, 4]


NEWCOMER_PAGES = r"^(counting\.pdf:1|table|two_columns)"


def test_the_newcomers_case_a_fallback_is_not_credited_to_the_model(pages, tmp_path, capsys):
    """A (before training) answers with its front matter; B (a training run broke the front matter) answers the
    references' text without it, so olmOCR's pipeline reads every B page from the PDF's text layer: --compare shows
    the pipeline's gain and the model-only score side by side, and says why they differ."""
    def before(seen):
        key, _ = identify(pages, seen.image)
        return {"content": FRONT.format(valid=True, turn=0) + "Page one"}

    def broken(seen):
        key, _ = identify(pages, seen.image)
        return {"content": pages[key][0].split("\n---\n", 1)[1]}

    for name, answer in (("A", before), ("B", broken)):
        with standin_server(answer) as (url, state):
            assert main(["--model", "standin", "--bench", str(SAMPLE), "--outputs", str(tmp_path / name), "--pages",
                         NEWCOMER_PAGES, "--backend", "server", "--server_url", url, "--protocol",
                         "olmocr-pipeline"]) == 0
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "A"), str(tmp_path / "B"), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "A: --protocol olmocr-pipeline; text-layer fallbacks 0, failed requests 0 of 3, pages without output 0" in out
    assert "B: --protocol olmocr-pipeline; text-layer fallbacks 3, failed requests 0 of 24, pages without output 0" in out
    assert "note: the sides differ in text-layer fallbacks (A 0, B 3): the scores as written read those pages from " \
           "the PDF's own text layer, not from the model; compare the models by the model-only score" in out
    assert out.index("== model only") < out.index("== as written")
    result = json.loads((tmp_path / "B" / "compare.json").read_text())
    pipeline, model_only = result["rows"]["overall"], result["model_only"]["rows"]["overall"]
    assert pipeline["diff"] > 0 and pipeline["diff_ci"][0] > 0  # the text layer's "gain"
    assert model_only["diff"] <= 0 and model_only["b"] < pipeline["b"]  # B's own answers: empty
    assert result["sides"][1] == {"protocol": "olmocr-pipeline", "model": "standin", "fallbacks": 3,
                                  "failed_requests": 0, "requests": 24, "missing_outputs": 0,
                                  "model_only_recorded": True}


def test_an_evaluation_whose_every_request_failed_exits_1_and_compare_names_its_failures(pages, tmp_path, capsys):
    with standin_server(lambda seen: {"content": FRONT.format(valid=True, turn=0) + "Page one"}) as (url, state):
        assert main(["--model", "standin", "--bench", str(SAMPLE), "--outputs", str(tmp_path / "A"), "--pages",
                     NEWCOMER_PAGES, "--backend", "server", "--server_url", url]) == 0
    with standin_server(lambda seen: {"status": 500}) as (url, state):
        code = main(["--model", "standin", "--bench", str(SAMPLE), "--outputs", str(tmp_path / "B"), "--pages",
                     NEWCOMER_PAGES, "--backend", "server", "--server_url", url, "--server_retries", "0"])
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("python -m olmocr_rl.evaluate: error: every request failed (3 of 3; the first: ")
    assert "HTTP 500 after 1 try" in err[0] and "run the same command again, which retries the failed pages" in err[0]
    assert main(["--compare", str(tmp_path / "A"), str(tmp_path / "B"), "--bootstrap", "100"]) == 0
    out = capsys.readouterr().out
    assert "B: --protocol single; text-layer fallbacks 0, failed requests 3 of 3, pages without output 3" in out
    assert "note: the sides differ in failed requests (A 0, B 3)" in out
    assert "note: the sides differ in pages without an output (A 0, B 3)" in out


def test_vllm_request_fields_go_only_to_a_vllm_server(pages, tmp_path, capsys):
    """A strict OpenAI-compatible server (400 for a field outside the chat API) that is not vLLM: the fields are
    left out, with one note; forced on, every request fails."""
    openai_fields = {"model", "messages", "max_tokens", "temperature", "top_p", "n", "seed"}

    def strict(seen):
        return {"status": 400} if set(seen.body) - openai_fields else {"content": "Page one"}

    with standin_server(strict, owner="openai") as (url, state):
        base = ["--model", "standin", "--bench", str(SAMPLE), "--pages", NEWCOMER_PAGES, "--backend", "server",
                "--server_url", url, "--server_retries", "0"]
        assert main([*base, "--outputs", str(tmp_path / "auto")]) == 0
        captured = capsys.readouterr()
        assert "overall pass rate" in captured.out
        notes = [line for line in captured.err.splitlines() if "note:" in line]
        assert len(notes) == 1 and "is taken as not vLLM (GET /v1/models says owned_by 'openai', not vllm)" in notes[0]
        assert set(state.seen[0].body) == openai_fields
        assert main([*base, "--outputs", str(tmp_path / "on"), "--server_vllm_fields", "on"]) == 1
        assert "every request failed (3 of 3" in capsys.readouterr().err


def test_pipeline_progress_rate_and_time_left_come_from_attempts():
    """Nothing finished yet (every page failing its attempts): the work left is one more attempt than the most any
    has had, per transcription, not zero; once some finished, each unfinished one is expected to take as many as
    they did (at least one more)."""
    import io

    from olmocr_rl.evaluation.progress import Progress

    stream = io.StringIO()
    progress = Progress(3, repeats=1, max_attempts=8, stream=stream)
    progress.started -= 10.0  # 10 s in
    progress.start_round({(0, 1): 2, (1, 1): 2, (2, 1): 2})
    for key in ((0, 1), (1, 1), (2, 1)):
        progress.attempt_done(key, finished=False)
    assert progress.rate() == pytest.approx(0.3, rel=0.01) and progress.work_left() == 3
    progress.round_done(3, 0)
    assert stream.getvalue().splitlines() == [
        "[evaluate] |........................| 0/3 pages, round 3 (3 of up to 8 attempts), 3 attempt(s) answered, "
        "0.30 attempts/s, ~10s left  round 3: 3 attempt(s), 0 transcription(s) finished"]
    waiting = Progress(5, max_attempts=8)  # one page on its 4th round, four not started: 4 attempts each expected
    waiting.start_round({(0, 1): 3})
    assert waiting.work_left() == 1 + 4 * 4
    progress.start_round({(0, 1): 3, (1, 1): 3, (2, 1): 3})
    progress.attempt_done((0, 1), finished=True)  # finished on its 4th attempt
    progress.page_done("p0")
    assert progress.work_left() == 2  # the other two: 4 expected, 3 had, at least 1 more each
    single = Progress(4, resumed=1)
    single.started -= 2.0
    single.page_done()
    assert single.work_left() == 2 and single.rate() == pytest.approx(0.5, rel=0.01)
