"""The one-GPU fit table of docs/scaling.md, from the colocate preflight's own arithmetic (olmocr_rl.model.colocate_memory).

    python scripts/bench/fit_table.py            # the markdown table
    python scripts/bench/fit_table.py --json     # the numbers
    python scripts/bench/fit_table.py --sharded  # docs/scaling.md's multi-GPU rows (ZeRO-2, ZeRO-3, FSDP2)

For the released Qwen2.5-VL-3B and -7B, Qwen3-VL-8B and Qwen3-VL-30B-A3B architectures (the presets of
olmocr_rl.model.families; configs only: parameters counted on the meta device, every expert of the MoE)
and olmOCR 2's recipe (configs/olmocr2-7b.yaml: 1288 px pages and 3,000-token completions give a 5,628-token
--vllm_max_model_length, bf16 engine, --beta 0.01): full fine-tuning with its reference model, the vision
tower frozen, and LoRA at the --lora_* defaults (r 16 on the language model's attention and MLP
projections; LoRA needs no reference model). Each GPU cell says whether the preflight lets the run start at
the default --vllm_gpu_memory_utilization, or at which share, or why not. Activations come on top.
"""

from __future__ import annotations

import argparse
import json

#: The released architectures in the table: (model_type, preset) of olmocr_rl.model.families.
RELEASED = {"Qwen2.5-VL-3B": ("qwen2_5_vl", "3b"), "Qwen2.5-VL-7B": ("qwen2_5_vl", "7b"),
            "Qwen3-VL-8B": ("qwen3_vl", "8b"), "Qwen3-VL-30B-A3B": ("qwen3_vl_moe", "30b-a3b")}
#: GPUs by the memory torch reports for them.
GPUS = {"one 80 GiB GPU (A100 / H100)": 80 * 2**30, "one H200 (141 GB)": 141 * 10**9}
MAX_MODEL_LENGTH = 5628  # 46 x 46 image tokens at 1288 px + 512 prompt tokens + 3,000 completion tokens
DEFAULT_UTILIZATION = 0.15


def released_config(name: str):
    """The config of a released architecture (the family's preset: the checkpoint's widths, depths, vocabulary)."""
    from olmocr_rl.model.families import preset_config

    return preset_config(*RELEASED[name])


def _cell(facts, training, gpu_bytes: int, need_gib: float, trainer_need: int | None = None) -> str:
    from olmocr_rl.model.colocate_memory import check_fit

    common = dict(gpu_bytes=gpu_bytes, max_model_length=MAX_MODEL_LENGTH, engine_dtype="bfloat16", training=training,
                  trainer_need_bytes=trainer_need)
    if check_fit(facts, utilization=DEFAULT_UTILIZATION, **common) is None:
        return f"fits at the default {DEFAULT_UTILIZATION}"
    for share in range(1, 100):
        if check_fit(facts, utilization=share / 100, **common) is None:
            return f"fits at `--vllm_gpu_memory_utilization {share / 100:.2f}`"
    return f"does not fit: {need_gib:.1f} GiB before activations (`--vllm_mode server` or more GPUs)"


def rows() -> list[dict]:
    from olmocr_rl.model.colocate_memory import (
        DTYPE_BYTES, ENGINE_RUNTIME_BYTES, GIB, Training, model_facts, trainer_bytes)

    modes = {"full fine-tune (`--beta 0.01`)": Training(reference_model=True),
             "`--freeze_vision_tower` (`--beta 0.01`)": Training(freeze_vision_tower=True, reference_model=True),
             "`--use_peft` (LoRA r 16)": Training(use_peft=True)}
    out = []
    for name in RELEASED:
        facts = model_facts(released_config(name))
        engine = (facts.parameters * DTYPE_BYTES["bfloat16"] + ENGINE_RUNTIME_BYTES
                  + facts.kv_bytes_per_token(DTYPE_BYTES["bfloat16"]) * MAX_MODEL_LENGTH)
        for mode, training in modes.items():
            if training.use_peft and facts.lora_parameters is None:
                continue  # the default LoRA targets do not exist (a MoE's experts are no linear layers)
            need = (engine + trainer_bytes(facts, training)) / GIB
            out.append({"model": f"{name} ({facts.parameters / 1e9:.2f}B)", "mode": mode,
                        "engine_gib": round(engine / GIB, 1), "trainer_gib": round(trainer_bytes(facts, training) / GIB, 1),
                        **{gpu: _cell(facts, training, size, need) for gpu, size in GPUS.items()}})
    return out


def markdown(table: list[dict]) -> str:
    header = ["model", "what trains", "colocated vLLM needs", "trainer needs at least", *GPUS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table:
        cells = [row["model"], row["mode"], f"{row['engine_gib']} GiB", f"{row['trainer_gib']} GiB",
                 *(row[gpu] for gpu in GPUS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The multi-GPU rows: (model, what trains, number of 80 GiB GPUs).
SHARDED = [("Qwen3-VL-8B", "full fine-tune (`--beta 0.01`)", 8),
           ("Qwen3-VL-30B-A3B", "full fine-tune (`--beta 0.01`)", 8),
           ("Qwen3-VL-30B-A3B", "full fine-tune (`--beta 0.01`)", 16),
           ("Qwen3-VL-30B-A3B", "`--freeze_vision_tower` (`--beta 0.01`)", 16)]
ENGINES = {"zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp2": "FSDP2"}


def sharded_rows(gpu_bytes: int = 80 * 2**30) -> list[dict]:
    """Per-GPU trainer floor on N GPUs under each engine; colocated vLLM (one bf16 engine per GPU, TP 1) or server
    mode (one GPU runs `trl vllm-serve`, N-1 train)."""
    from olmocr_rl.model.colocate_memory import (
        DTYPE_BYTES, ENGINE_RUNTIME_BYTES, GIB, Training, model_facts, sharded_trainer_bytes)

    trainings = {"full fine-tune (`--beta 0.01`)": Training(reference_model=True),
                 "`--freeze_vision_tower` (`--beta 0.01`)": Training(freeze_vision_tower=True, reference_model=True)}
    out = []
    for name, mode, gpus in SHARDED:
        facts = model_facts(released_config(name))
        engine_bytes = (facts.parameters * DTYPE_BYTES["bfloat16"] + ENGINE_RUNTIME_BYTES
                        + facts.kv_bytes_per_token(DTYPE_BYTES["bfloat16"]) * MAX_MODEL_LENGTH)
        for engine, label in ENGINES.items():
            colocated = sharded_trainer_bytes(facts, trainings[mode], engine=engine, processes=gpus)
            server = sharded_trainer_bytes(facts, trainings[mode], engine=engine, processes=gpus - 1)
            out.append({"model": f"{name} ({facts.parameters / 1e9:.2f}B)", "mode": mode, "gpus": gpus,
                        "engine": label, "trainer_gib": round(colocated / GIB, 1),
                        "colocated": _cell(facts, trainings[mode], gpu_bytes, (engine_bytes + colocated) / GIB, colocated),
                        "server_trainer_gib": round(server / GIB, 1),
                        "server": "fits" if server <= gpu_bytes else "does not fit"})
    return out


def sharded_markdown(table: list[dict]) -> str:
    header = ["model", "what trains", "80 GiB GPUs", "engine", "trainer per GPU (colocated)", "colocated vLLM",
              "trainer per GPU (server: N-1 train)", "server"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in table:
        cells = [r["model"], r["mode"], str(r["gpus"]), r["engine"], f"{r['trainer_gib']} GiB", r["colocated"],
                 f"{r['server_trainer_gib']} GiB", r["server"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--sharded", action="store_true", help="the multi-GPU rows (docs/scaling.md)")
    args = parser.parse_args()
    table = sharded_rows() if args.sharded else rows()
    print(json.dumps(table, indent=2) if args.json else (sharded_markdown if args.sharded else markdown)(table))


if __name__ == "__main__":
    main()
