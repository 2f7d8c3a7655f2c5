"""The evaluation folder of ``python -m olmocr_rl.evaluate`` written page by page: a stopped run continues where it
stopped to the uninterrupted run's result, another run's folder is refused in one line (``--overwrite`` replaces
it), a failed page is retried, bad ``--outputs`` paths are one line before anything loads; and the flags through
``--config`` YAML. In this process, against the stand-in server (tests/openai_standin.py); the real signals and
processes are tests/integration/test_evaluate_signals.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmocr_rl.evaluate import BackendFlags, evaluate, main
from olmocr_rl.evaluation.backends import ServerBackend
from openai_standin import pixels, standin_server

SAMPLE = Path(__file__).resolve().parents[2] / "bench_data_sample"
PAGES = r"^(counting|simple_lines|table|paragraphs)"  # 5 pages
FRONT = "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\nis_diagram: False\n---\n"


def page_text(seen) -> dict:
    """A different, deterministic text per page (by its image size and a few pixels) and per seed."""
    image = seen.image
    return {"content": FRONT + f"page {image.size} {image.getpixel((image.width // 2, image.height // 3))} "
                               f"seed {seen.body['seed']}"}


class StopAfter(ServerBackend):
    """The server backend, interrupted (as Ctrl-C would) once ``pages`` pages have been answered."""

    def __init__(self, url, pages):
        super().__init__(url, "standin", concurrency=1, backoff_s=0.01)
        self.left = pages

    def generate(self, requests, done=None):
        def counting(i, completions):
            if self.left == 0:
                raise KeyboardInterrupt
            self.left -= 1
            done(i, completions)

        return super().generate(requests, counting)


def run(url, out, backend=None, **kwargs):
    return evaluate("standin", SAMPLE, outputs=out, pages=PAGES, flags=BackendFlags(backend="server", server_url=url),
                    backend=backend or ServerBackend(url, "standin", concurrency=1, backoff_s=0.01), **kwargs)


def requested(state) -> set[str]:
    """The pages the server was asked for (a stopped run's request still in flight may arrive late: it is one of
    the pages not done)."""
    from olmocr_rl.data.dataset import OlmOCRBenchDataset, page_key

    dataset = OlmOCRBenchDataset(str(SAMPLE), pages=PAGES)
    by_pixels = {pixels(dataset[i]["image"]): page_key(s["pdf"], s["page"]) for i, s in enumerate(dataset.samples)}
    return {by_pixels[pixels(seen.image)] for seen in state.seen}


def files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*.md"))}


def test_a_stopped_run_continues_where_it_stopped_to_the_uninterrupted_result(tmp_path):
    with standin_server(page_text) as (url, state):
        whole = run(url, tmp_path / "whole")
        with pytest.raises(KeyboardInterrupt) as stopped:
            run(url, tmp_path / "out", StopAfter(url, 2))
        assert (stopped.value.pages_done, stopped.value.pages_total) == (2, 5)
        out = tmp_path / "out"
        assert len((out / "pages.jsonl").read_text().splitlines()) == 2 and not (out / "scores.json").exists()
        assert len(files(out)) == 2
        state.seen.clear()
        resumed = run(url, out)
        assert requested(state) == {"paragraphs.pdf:1", "simple_lines.pdf:1", "table.pdf:1"}  # the pages not done
    assert resumed["resumed_pages"] == 2 and whole["resumed_pages"] == 0
    assert resumed["tests"] == whole["tests"] and resumed["overall_pass_rate"] == whole["overall_pass_rate"]
    assert files(out) == files(tmp_path / "whole")
    assert resumed["leaderboard"] == whole["leaderboard"]
    # a finished run, run again: nothing is transcribed, the same result
    with standin_server(page_text) as (url, state):
        again = run(url, out)
        assert state.seen == []
    assert again["tests"] == whole["tests"]


def test_a_record_cut_by_a_kill_is_dropped_and_its_page_redone(tmp_path):
    with standin_server(page_text) as (url, state):
        whole = run(url, tmp_path / "whole")
        with pytest.raises(KeyboardInterrupt):
            run(url, tmp_path / "out", StopAfter(url, 3))
        pages = tmp_path / "out" / "pages.jsonl"
        lines = pages.read_text().splitlines(keepends=True)
        pages.write_text("".join(lines[:2]) + lines[2][:40])  # SIGKILL in the middle of writing the third record
        state.seen.clear()
        resumed = run(url, tmp_path / "out")
        assert requested(state) == {"paragraphs.pdf:1", "simple_lines.pdf:1", "table.pdf:1"}
    assert resumed["tests"] == whole["tests"]
    assert [json.loads(line)["page"] for line in pages.read_text().splitlines()] == resumed["pages"][:2] + [
        p for p in resumed["pages"] if p not in resumed["pages"][:2]]


def test_a_failed_page_is_retried_by_the_same_command(tmp_path):
    from olmocr_rl.data.dataset import OlmOCRBenchDataset

    down = [pixels(OlmOCRBenchDataset(str(SAMPLE), pages=r"^counting\.pdf:2")[0]["image"])]

    def answer(seen):
        return {"status": 503} if pixels(seen.image) in down else page_text(seen)

    with standin_server(answer) as (url, state):
        first = run(url, tmp_path / "out", ServerBackend(url, "standin", concurrency=1, retries=0))
        assert first["failed_requests"] == 1 and first["requests"] == 5
        assert first["missing_outputs"] == ["counting_pg2_repeat*.md"]
        assert first["first_failure"].startswith("counting.pdf:2: HTTP 503")
        down.clear()  # the server is fixed
        state.seen.clear()
        second = run(url, tmp_path / "out")
        assert len(state.seen) == 1
    assert second["failed_requests"] == 0 and second["missing_outputs"] == [] and second["resumed_pages"] == 4


def _error_line(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip() and not line.startswith("[evaluate]")]
    assert code == 2 and captured.out == "" and len(lines) == 1, captured.err
    assert lines[0].startswith("python -m olmocr_rl.evaluate: error: ")
    return lines[0]


def test_another_runs_folder_is_refused_in_one_line_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    with standin_server(page_text) as (url, state):
        server = ["--model", "standin", "--bench", SAMPLE, "--outputs", out, "--backend", "server", "--server_url", url]
        base = [*server, "--pages", PAGES]
        assert main(list(map(str, base))) == 0
        capsys.readouterr()
        seen = len(state.seen)
        line = _error_line(capsys, *base, "--seed", 1)
        assert "holds another run's evaluation: --seed (the folder's run: 0; this run: 1)" in line
        assert "--overwrite to replace it" in line
        line = _error_line(capsys, *server, "--pages", "counting")
        assert "the page selection (--pages / --exclude_pages / --jsonl_filter) (the folder's run: 5 pages; this run: " \
               "2 pages) (and 1 more difference(s))" in line
        line = _error_line(capsys, *base, "--protocol", "olmocr-pipeline")
        assert "--protocol (the folder's run: single; this run: olmocr-pipeline)" in line
        assert len(state.seen) == seen  # nothing was sent for the refused runs
        assert main([*map(str, base), "--seed", "1", "--overwrite", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["seed"] == 1 and result["resumed_pages"] == 0
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["identity"]["seed"] == 1


def test_bad_outputs_paths_are_one_line_before_anything_is_sent(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "counting_pg1_repeat1.md").write_text("an earlier version's transcription")
    with standin_server(page_text) as (url, state):
        base = ["--model", "standin", "--bench", SAMPLE, "--pages", PAGES, "--backend", "server", "--server_url", url]
        line = _error_line(capsys, *base, "--outputs", tmp_path / "a_file")
        assert f"--outputs {tmp_path / 'a_file'} is a file, not a folder" in line
        line = _error_line(capsys, *base, "--outputs", tmp_path / "a_file" / "below")
        assert "cannot write there" in line
        line = _error_line(capsys, *base, "--outputs", foreign)
        assert "holds evaluation files without a run.json" in line
        assert state.seen == []
    assert (foreign / "counting_pg1_repeat1.md").is_file()  # untouched


def test_flags_come_from_a_config_yaml_as_the_trainers_do(tmp_path, capsys):
    out = tmp_path / "out"
    with standin_server(page_text) as (url, state):
        config = tmp_path / "eval.yaml"
        config.write_text(f"model: standin\nbench: {SAMPLE}\npages: '^counting'\nbackend: server\nserver_url: {url}\n"
                          f"outputs: {out}\njson: true\nbootstrap: 50\n")
        assert main(["--config", str(config), "--seed", "3"]) == 0  # the command line on top of the file
        result = json.loads(capsys.readouterr().out)
    assert result["pages"] == ["counting.pdf:1", "counting.pdf:2"] and result["seed"] == 3
    assert result["leaderboard"]["resamples"] == 50
    for text, expected in (("modle: x\n", "unknown key 'modle'"),
                           ("compare: only_one\n", "key 'compare': expected a list of 2 values, got ['only_one']")):
        config.write_text(text)
        assert main(["--config", str(config)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("python -m olmocr_rl.evaluate: error: --config ") and expected in err, err
    assert main(["--help"]) == 0
    helped = capsys.readouterr().out
    assert "--config CONFIG" in helped and "--backend vllm: vLLM's offline engine" in helped
    assert "(default: 8)" in helped  # --server_concurrency's default, shown as the trainer's are


class Batches:
    """An hf-like backend that answers each page with its batch's seed and position, and stops (as Ctrl-C) once
    ``stop_after`` pages have been answered."""

    name = "hf"

    def __init__(self, stop_after=None):
        self.stop_after, self.batches = stop_after, []

    def generate(self, requests, done=None):
        from olmocr_rl.evaluation.common import Completion

        self.batches.append([r.key for r in requests])
        out = []
        for i, request in enumerate(requests):
            if self.stop_after == 0:
                raise KeyboardInterrupt
            self.stop_after = None if self.stop_after is None else self.stop_after - 1
            out.append([Completion(f"{request.key} from the batch of {requests[0].key}", 3, "stop")])
            done(i, out[-1])
        return out

    def close(self):
        pass


def test_an_hf_batch_stopped_halfway_is_run_whole_again(tmp_path, tiny_model_dir):
    """hf seeds a batch from its first page and pads it: a batch half done when the run stopped is transcribed
    whole again (the same batch, the same texts), and only its missing page is written."""
    def run_hf(out, backend):
        return evaluate(str(tiny_model_dir), SAMPLE, outputs=out, pages=PAGES, batch_size=2, backend=backend)

    whole = run_hf(tmp_path / "whole", Batches())
    first = Batches(stop_after=3)  # the second batch (paragraphs, simple_lines) stopped after its first page
    with pytest.raises(KeyboardInterrupt):
        run_hf(tmp_path / "out", first)
    assert first.batches == [["counting.pdf:1", "counting.pdf:2"], ["paragraphs.pdf:1", "simple_lines.pdf:1"]]
    second = Batches()
    resumed = run_hf(tmp_path / "out", second)
    assert second.batches == [["paragraphs.pdf:1", "simple_lines.pdf:1"], ["table.pdf:1"]]
    assert resumed["resumed_pages"] == 3 and files(tmp_path / "out") == files(tmp_path / "whole")
    assert resumed["tests"] == whole["tests"]


def test_pages_are_rendered_at_the_flags_size_and_a_folder_of_another_size_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    with standin_server(page_text) as (url, state):
        server = ["--model", "standin", "--bench", SAMPLE, "--outputs", out, "--backend", "server", "--server_url", url,
                  "--pages", "counting"]
        assert main(list(map(str, [*server, "--target_longest_image_dim", 448, "--json"]))) == 0
        result = json.loads(capsys.readouterr().out)
        assert {max(seen.image.size) for seen in state.seen} == {448} and result["sampling"]["image_dim"] == 448
        line = _error_line(capsys, *server)  # the default, olmOCR's 1288
        assert "--target_longest_image_dim (the folder's run: 448; this run: 1288)" in line, line
        assert main(list(map(str, [*server, "--outputs", tmp_path / "default"]))) == 0
        assert max(state.seen[-1].image.size) == 1288
        capsys.readouterr()
        assert "--target_longest_image_dim must be an integer of at least 28 pixels, got 5" in _error_line(
            capsys, *server, "--outputs", tmp_path / "x", "--target_longest_image_dim", 5)


def test_a_folder_written_before_the_image_size_was_recorded_resumes_at_olmocrs_size(tmp_path):
    with standin_server(page_text) as (url, state):
        first = run(url, tmp_path / "out")
        run_json = tmp_path / "out" / "run.json"
        record = json.loads(run_json.read_text())
        assert record["identity"].pop("image_dim") == 1288
        run_json.write_text(json.dumps(record))
        seen = len(state.seen)
        again = run(url, tmp_path / "out")
        assert len(state.seen) == seen and again["resumed_pages"] == 5 and again["tests"] == first["tests"]
