"""Benchmark: ``python -m olmocr_rl.evaluate``'s backends, pages per second on the same pages, same decoding.

    python scripts/bench/bench_evaluate.py --model models/tiny-sft [--bench bench_data_sample] [--max_new_tokens 256]
        [--backends hf,vllm,server] [--hf_batch_sizes 1,10] [--server_url URL] [--work DIR]

Each arm runs ``olmocr_rl.evaluate.evaluate`` (greedy, --protocol single) on the selected pages and prints its
pages/s over transcription time (engine or server start-up not counted; printed apart), its overall score, and
whether each page's transcription equals hf's (batch size 1). ``server`` uses --server_url, or starts
``vllm serve MODEL`` on loopback for the run (its start-up is printed, not counted). Arms that need vLLM are
skipped, saying so, where it is not installed. The same command is the GPU row of docs/gpu_check.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from olmocr_rl.evaluate import BackendFlags, evaluate  # noqa: E402
from olmocr_rl.evaluation.common import output_path  # noqa: E402


@contextlib.contextmanager
def vllm_serve(model: str, max_model_len: int, log: Path, enforce_eager: bool = False):
    """``vllm serve MODEL`` on a free loopback port; yields its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    handle = log.open("w")
    process = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--host", "127.0.0.1",
                                "--port", str(port), "--max-model-len", str(max_model_len), "--gpu-memory-utilization",
                                "0.3", "--dtype", "float32" if not _cuda() else "auto",
                                *(["--enforce-eager"] if enforce_eager else [])], stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 900
        while True:
            if process.poll() is not None:
                raise SystemExit(f"vllm serve exited {process.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            if time.time() > deadline:
                raise SystemExit("vllm serve did not answer /health within 900 s")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        handle.close()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def texts(result: dict, outputs: Path) -> dict:
    return {page: output_path(outputs, page.rsplit(":", 1)[0], int(page.rsplit(":", 1)[1]), 1).read_text()
            for page in result["pages"]}


def run_arm(label: str, args, work: Path, flags: BackendFlags) -> tuple[dict, dict, float]:
    began = time.perf_counter()
    outputs = work / label.replace(" ", "_").replace("=", "")
    result = evaluate(args.model, args.bench, outputs=outputs, pages=args.pages, max_new_tokens=args.max_new_tokens,
                      flags=flags, overwrite=True)  # every arm transcribes afresh (no page taken from a --work rerun)
    return result, texts(result, outputs), time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder (e.g. models/tiny-sft)")
    parser.add_argument("--bench", default=str(REPO_ROOT / "bench_data_sample"))
    parser.add_argument("--pages", default=None, help="page regex (default all)")
    parser.add_argument("--max_new_tokens", type=int, default=256)
    parser.add_argument("--backends", default="hf,vllm,server")
    parser.add_argument("--hf_batch_sizes", default="1", help="hf arms, e.g. 1,10")
    parser.add_argument("--server_url", default=None, help="an OpenAI-compatible server already serving --model")
    parser.add_argument("--max_model_len", type=int, default=8192, help="vllm and the started server")
    parser.add_argument("--enforce_eager", action="store_true",
                        help="vllm arm and the started server: no compilation (faster start, slower decoding)")
    parser.add_argument("--work", default=None, help="folder for the evaluation folders (default a temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_evaluate-"))
    backends = args.backends.split(",")
    rows, reference = [], None
    for name in backends:
        if name in ("vllm", "server") and not args.server_url and importlib.util.find_spec("vllm") is None:
            print(f"{name}: skipped (needs vLLM: the vLLM lane's environment)")
            continue
        if name == "hf":
            arms = [(f"hf batch={b}", BackendFlags(batch_size=int(b)), None) for b in args.hf_batch_sizes.split(",")]
        elif name == "vllm":
            arms = [("vllm", BackendFlags(backend="vllm", vllm_max_model_len=args.max_model_len,
                                          vllm_gpu_memory_utilization=0.3, vllm_enforce_eager=args.enforce_eager), None)]
        else:
            arms = [("server", None, args.server_url)]
        for label, flags, url in arms:
            if name == "server":
                with contextlib.ExitStack() as stack:
                    started = time.perf_counter()
                    url = url or stack.enter_context(vllm_serve(args.model, args.max_model_len, work / "server.log",
                                                                args.enforce_eager))
                    startup = time.perf_counter() - started
                    flags = BackendFlags(backend="server", server_url=url, server_model=args.model)
                    result, pages, wall = run_arm(label, args, work, flags)
                wall += startup
            else:
                result, pages, wall = run_arm(label, args, work, flags)
            reference = reference or pages
            same = sum(pages[p] == reference[p] for p in pages)
            rows.append((label, result, wall, f"{same}/{len(pages)}"))
    base = next((r[1]["pages_per_s"] for r in rows if r[0].startswith("hf batch=1")), None)
    print(f"\n{len(reference or {})} pages of {args.bench}, greedy, max {args.max_new_tokens} new tokens, {args.model}")
    print(f"{'arm':<14} {'pages/s':>8} {'x hf':>6} {'transcribe s':>13} {'wall s':>8} {'tokens':>7} {'overall':>8}  same as hf")
    for label, result, wall, same in rows:
        ratio = f"{result['pages_per_s'] / base:.2f}" if base else "-"
        print(f"{label:<14} {result['pages_per_s']:8.3f} {ratio:>6} {result['generate_s']:13.1f} {wall:8.1f} "
              f"{result['generated_tokens']:7d} {100 * result['overall_pass_rate']:7.1f}%  {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
