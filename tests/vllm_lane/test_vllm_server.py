"""The training CLI with ``--vllm_mode server`` against ``trl vllm-serve`` on loopback (vLLM's CPU build), fp32.

Without CUDA the trainer pushes its weights to the server over gloo (olmocr_rl/trainer/gloo_push.py; the
server runs with its flags, ``server_flags()``). Three steps at a large learning rate, as the colocated runs:
a push that did not arrive, arrived wrong (LoRA merge, MoE expert layout or packing), or a stale encoder cache
shows as a log-prob gap from step 2 on. One server serves the plain, ``--olmorl`` and LoRA arms in turn (each
run pushes its weights before its first step); the tiny MoE has a server of its own, and runs first, so that
two servers never share the machine.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import warm_python
from fault_helpers import wait_for_record
from safetensors.torch import load_file

from olmocr_rl.trainer.gloo_push import server_flags
from vllm_lane.lane import BENCH, RECORDER, REPO, failure, lane_env, read_metrics, run_recorded
from vllm_lane.test_vllm_colocate import MAX_LOGP_GAP, check_prompts_and_pads, vision_pad_ids

ARMS = {"plain": [], "olmorl": ["--olmorl"], "lora": ["--use_peft", "--learning_rate", 1e-2]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def vllm_server(model_dir: Path, folder: Path):
    """``trl vllm-serve`` with the gloo push's flags on a free loopback port; yields the port. Eager
    (``--enforce_eager``): torch.compile would add about 110 s to each start on a quiet core; the compiled engine,
    vLLM's default, is proven by the colocated runs (test_vllm_colocate.py), whose weight syncs go through the same
    ``load_weights`` as the server's pushes."""
    port, log_path = _free_port(), folder / "server.log"
    log = log_path.open("w")
    process = warm_python.popen(  # `trl vllm-serve`, forked from the lane's preloaded interpreter
        [sys.executable, "-m", "trl.cli.main", "vllm-serve", "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
         "--dtype", "float32", "--max_model_len", "4096", "--gpu_memory_utilization", "0.2", *server_flags(),
         "--enforce_eager"],
        env=lane_env(folder), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.time() + 600  # a busy machine: start-up took up to 175 s at load 19
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"trl vllm-serve exited {process.returncode}:\n{log_path.read_text()[-4000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            if time.time() > deadline:
                pytest.fail("trl vllm-serve did not answer /health within 600 s")
            time.sleep(2)
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def qwen25_server(sft_model_dir, tmp_path_factory):
    with vllm_server(sft_model_dir, tmp_path_factory.mktemp("server")) as port:
        yield port


def server_flags_for(model, out, port, *, steps=3) -> list:
    return [
        "--train_bench_data_folder", BENCH, "--model_name", model, "--output_dir", out, "--reward_bench",
        "--num_generations", 4, "--per_device_train_batch_size", 4, "--gradient_accumulation_steps", 1,
        "--max_steps", steps, "--max_completion_length", 128, "--vllm_mode", "server",
        "--vllm_server_host", "127.0.0.1", "--vllm_server_port", port, "--report_to", "none",
        "--no-log_completions", "--logging_steps", 1, "--target_longest_image_dim", 448, "--pages", "simple_lines",
        "--learning_rate", 1e-3, "--warmup_steps", 0, "--save_steps", 100000, "--seed", 0,
    ]


def check_server_run(model_dir: Path, tmp_path: Path, port: int, extra: list, label: str) -> list[float]:
    out = tmp_path / "out"
    result, records = run_recorded(tmp_path, server_flags_for(model_dir, out, port) + extra)
    assert result.returncode == 0, failure(result)
    check_prompts_and_pads(records, vision_pad_ids(model_dir), steps=3)
    # one gloo push and one encoder-cache reset before each step's generation (the first sends the start weights)
    assert [r["server_weight_pushes"] for r in records] == [1, 2, 3]
    assert [r["server_encoder_cache_resets"] for r in records] == [1, 2, 3]
    metrics = read_metrics(out)
    gaps = [m["sampling/sampling_logp_difference/mean"] for m in metrics]
    assert len(gaps) == 3 and max(gaps) <= MAX_LOGP_GAP, gaps
    # The weights moved, so a push that did not arrive would show from step 2 on.
    before, after = load_file(model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    moved = max((after[k] - before[k]).abs().max().item() for k in before)
    assert moved > 1e-3
    print(f"server {label}: mean |vLLM - trainer| log-prob per step {gaps}; "
          f"max {[m['sampling/sampling_logp_difference/max'] for m in metrics]}; weights moved by up to {moved:.4f}")
    return gaps


def test_server_mode_trains_a_tiny_moe(warm_qwen3_vl_moe_release_dir, tmp_path):
    """Experts pushed in the released layout and re-packed for the CPU MoE kernel by the server's worker."""
    with vllm_server(warm_qwen3_vl_moe_release_dir, tmp_path) as port:
        check_server_run(warm_qwen3_vl_moe_release_dir, tmp_path, port, ["--reward_bench_edit_distance", 1.0], "moe")


def test_evaluate_backends_give_hf_greedy_transcriptions_page_by_page(sft_model_dir, qwen25_server, tmp_path,
                                                                     monkeypatch):
    """``python -m olmocr_rl.evaluate``'s three backends, greedy, on the warm tiny model: the OpenAI-compatible
    server (this module's ``trl vllm-serve``, before any training run pushes weights into it) and vLLM's offline
    engine write, page by page, what Hugging Face ``generate`` writes. It sits before the gloo-push tests for that
    reason (and after the MoE test, whose server must not share the machine with this one)."""
    from olmocr_rl.evaluate import BackendFlags, evaluate

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: no child to start
    pages, texts, speed = r"^(counting\.pdf:1|table)", {}, {}
    flags = {"hf": BackendFlags(),
             "server": BackendFlags(backend="server", server_url=f"http://127.0.0.1:{qwen25_server}",
                                    server_model=str(sft_model_dir)),
             "vllm": BackendFlags(backend="vllm", vllm_max_model_len=4096, vllm_enforce_eager=True,
                                  vllm_gpu_memory_utilization=0.2)}
    for name, flag in flags.items():
        out = tmp_path / name
        result = evaluate(str(sft_model_dir), BENCH, outputs=out, pages=pages, max_new_tokens=48, flags=flag)
        texts[name] = {p: (out / f"{p.split('.pdf')[0]}_pg1_repeat1.md").read_text() for p in result["pages"]}
        speed[name] = (result["pages_per_s"], result["overall_pass_rate"])
    assert list(texts["hf"]) == ["counting.pdf:1", "table.pdf:1"] and all(texts["hf"].values())
    assert texts["server"] == texts["hf"] and texts["vllm"] == texts["hf"]
    print(f"evaluate backends, greedy, 48 tokens: (pages/s, overall) {speed}")


def test_synth_from_pdfs_round_trip_rejects_the_noise_answer_and_counts_it(sft_model_dir, qwen25_server):
    """``python -m olmocr_rl.synth --from_pdfs``'s page -> HTML half against this module's real server: the page goes
    in as training renders it (1288 px), the tiny model answers noise, and the page is skipped with its reason (no
    HTML, or the length limit) -- nothing is rendered from it (no browser in this lane: a kept answer would fail)."""
    import argparse

    from olmocr_rl.config.values import DEFAULT_TARGET_LONGEST_IMAGE_DIM
    from olmocr_rl.data.render import render_page
    from olmocr_rl.synth import server as synth_server

    args = argparse.Namespace(html=None, from_pdfs=str(BENCH / "pdfs"), server=f"http://127.0.0.1:{qwen25_server}",
                              model=str(sft_model_dir), max_tokens=64, request_timeout_s=300.0, seed=0, refine=False)
    synth_server.check_server_args(args)  # the server answers /v1/models
    image = render_page(BENCH / "pdfs" / "table.pdf", 1, DEFAULT_TARGET_LONGEST_IMAGE_DIM)
    assert max(image.size) == DEFAULT_TARGET_LONGEST_IMAGE_DIM == 1288
    skip = synth_server._one_page(args, None, "table.pdf:1", image)
    assert isinstance(skip, synth_server.ServerSkip), skip
    assert skip.source == "table.pdf:1" and skip.kind in ("no_html", "length") and skip.reason, skip
    print(f"synth --from_pdfs on the real server: {skip.kind}: {skip.reason}")


@pytest.mark.parametrize("arm", list(ARMS))
def test_server_mode_trains_with_the_gloo_push(sft_model_dir, qwen25_server, tmp_path, arm):
    check_server_run(sft_model_dir, tmp_path, qwen25_server, ["--reward_bench_edit_distance", 1.0, *ARMS[arm]], arm)


def test_a_server_without_the_gloo_flags_is_one_error_line_before_the_model_loads(tmp_path):
    """A stand-in server answers /server_info with TRL's NCCL backend: the CLI names the flags, loads nothing."""
    body = json.dumps({"vllm_config": {"weight_transfer_config": {"backend": "nccl"}}}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        flags = server_flags_for("/nonexistent/model", tmp_path / "out", server.server_address[1], steps=1)
        result = warm_python.run([sys.executable, "-m", "olmocr_rl.grpo_train", *map(str, flags)],
                                 env=lane_env(tmp_path), capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 1 and len(errors) == 1, failure(result)
    assert errors[0].startswith("error: --vllm_server_host/--vllm_server_port: ") and "takes weights over nccl" in errors[0]
    assert " ".join(server_flags()) in errors[0]


# --- --async_generation: the next step's batch sampled while this one trains --------------------------------------

#: Three pages, one a step (4 samples): steps 1-3 are epoch 0, step 4 starts epoch 1 (the batch sent ahead during
#: step 3 comes from epoch 1's page order).
ASYNC_PAGES = ["--pages", "simple_lines|table|blank"]


def async_flags(model, out, port, *, steps, lr) -> list:
    flags = server_flags_for(model, out, port, steps=steps) + ["--reward_bench_edit_distance", 1.0, *ASYNC_PAGES,
                                                                "--async_generation", "--learning_rate", lr]
    return flags


def per_step_metrics(out: Path) -> dict[int, dict]:
    return {m["step"]: m for m in read_metrics(out)}


def pages_by_step(records: list[dict]) -> dict[int, str]:
    """The page (a hash of its image) the trainer scored at each step (1-based)."""
    return {r["step"] + 1: r["first_image_digest"] for r in records}


@pytest.fixture(scope="module")
def async_reference(sft_model_dir, qwen25_server, tmp_path_factory):
    """An uninterrupted --async_generation run of 4 steps at learning rate 1e-9: (output folder, rollout records)."""
    tmp = tmp_path_factory.mktemp("async_reference")
    result, records = run_recorded(tmp, async_flags(sft_model_dir, tmp / "out", qwen25_server, steps=4, lr=1e-9))
    assert result.returncode == 0, failure(result)
    return tmp / "out", records


def test_async_generation_samples_ahead_with_the_prompts_the_trainer_scores(sft_model_dir, async_reference):
    """The weights barely move (learning rate 1e-9), so a batch sampled one step ahead must still score as the
    trainer scores it: every prefetched batch's prompt, image features and completions are paired right."""
    out, records = async_reference
    check_prompts_and_pads(records, vision_pad_ids(sft_model_dir), steps=4)
    metrics = per_step_metrics(out)
    assert [metrics[s]["async/prefetched"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]  # epoch 1's page too
    assert [metrics[s]["async/staleness"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    gaps = [metrics[s]["sampling/sampling_logp_difference/mean"] for s in (1, 2, 3, 4)]
    assert max(gaps) <= MAX_LOGP_GAP, gaps
    pages = pages_by_step(records)
    assert len(set(pages.values())) == 3 and None not in pages.values(), pages  # three pages, then epoch 1's first
    assert [r["server_weight_pushes"] for r in records] == [1, 2, 3, 4]  # one push a step, none mid-request
    print(f"async: |vLLM - trainer| log-prob per step {gaps}; server time per prefetched batch "
          f"{[round(metrics[s]['async/server_generate_s'], 2) for s in (2, 3, 4)]} s")


def test_async_generation_sigterm_saves_the_step_and_the_resume_regenerates_the_batch_in_flight(
        sft_model_dir, qwen25_server, async_reference, tmp_path):
    """A SIGTERM in step 2 saves that step (exit 75) with the next step's batch in flight; the resume samples that
    batch again from the checkpoint's weights (staleness 0), then prefetches again; the pages are the uninterrupted
    run's (its learning rate differs: the page order does not depend on it)."""
    out = tmp_path / "out"
    (tmp_path / "resume").mkdir()

    log = tmp_path / "first.log"
    command = [sys.executable, str(RECORDER), str(tmp_path / "first.jsonl"), "--",
               *map(str, async_flags(sft_model_dir, out, qwen25_server, steps=4, lr=1e-3))]
    with log.open("w") as handle:
        process = warm_python.popen(command, cwd=REPO, env=lane_env(tmp_path), stdout=handle,
                                    stderr=subprocess.STDOUT)
    try:
        wait_for_record(process, out / "metrics.jsonl", 1, timeout=600)  # step 1 logged: the signal lands in step 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=300) == 75, log.read_text()[-4000:]
    finally:
        process.kill()
    text = log.read_text()
    stopped = [line for line in text.splitlines() if "stopped by SIG" in line]
    assert len(stopped) == 1, text[-3000:]
    step = int(stopped[0].split(" after step ")[1].split(":")[0])
    assert step in (2, 3) and (out / f"checkpoint-{step}").is_dir()

    result, records = run_recorded(tmp_path / "resume", [*async_flags(sft_model_dir, out, qwen25_server, steps=4,
                                                                       lr=1e-3), "--resume_from_checkpoint"])
    assert result.returncode == 0, failure(result)
    resumed = per_step_metrics(out)
    assert resumed[step + 1]["async/prefetched"] == 0.0 and resumed[step + 1]["async/staleness"] == 0.0
    if step + 2 <= 4:
        assert resumed[step + 2]["async/prefetched"] == 1.0 and resumed[step + 2]["async/staleness"] == 1.0
    masked = [resumed[s]["sampling/is_masked_sequence_fraction"] for s in range(1, 5)]
    assert all(0.0 <= m <= 1.0 for m in masked), masked
    expected = pages_by_step(async_reference[1])
    assert pages_by_step(records) == {s: expected[s] for s in range(step + 1, 5)}


def test_the_server_phases_benchmark_runs_both_arms(sft_model_dir, qwen25_server, tmp_path):
    """scripts/bench/bench_server_phases.py at a tiny size on the lane's server (the main lane's smoke table skips it:
    it needs vLLM): both arms run and the ratio line is printed."""
    script = REPO / "scripts" / "bench" / "bench_server_phases.py"
    result = warm_python.run([sys.executable, str(script), "--model", str(sft_model_dir), "--server-port",
                              str(qwen25_server), "--lengths", "8", "--steps", "3", "--trainer-core", "0"],
                             cwd=REPO, env=lane_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "length 8: async/sync step time" in result.stdout, result.stdout[-2000:]
    assert "prefetched 1.00" in result.stdout
