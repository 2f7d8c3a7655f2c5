"""The README's one-GPU fit table, from the colocate preflight's own arithmetic (olmocr_rl.model.colocate_memory).

    python scripts/bench/fit_table.py            # the markdown table
    python scripts/bench/fit_table.py --json     # the numbers

For the released Qwen2.5-VL-3B and -7B architectures (configs only: parameters counted on the meta device)
and olmOCR 2's recipe (configs/olmocr2-7b.yaml: 1288 px pages and 3,000-token completions give a 5,628-token
--vllm_max_model_length, bf16 engine, --beta 0.01): full fine-tuning with its reference model, the vision
tower frozen, and LoRA at the --lora_* defaults (r 16 on the language model's attention and MLP
projections; LoRA needs no reference model). Each GPU cell says whether the preflight lets the run start at
the default --vllm_gpu_memory_utilization, or at which share, or why not. Activations come on top.
"""

from __future__ import annotations

import argparse
import json

#: The released architectures (config.json facts; vocabulary, widths, depths, heads).
RELEASED = {
    "Qwen2.5-VL-3B": dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                          num_attention_heads=16, num_key_value_heads=2, tie=True),
    "Qwen2.5-VL-7B": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                          num_attention_heads=28, num_key_value_heads=4, tie=False),
}
#: GPUs by the memory torch reports for them.
GPUS = {"one 80 GiB GPU (A100 / H100)": 80 * 2**30, "one H200 (141 GB)": 141 * 10**9}
MAX_MODEL_LENGTH = 5628  # 46 x 46 image tokens at 1288 px + 512 prompt tokens + 3,000 completion tokens
DEFAULT_UTILIZATION = 0.15


def released_config(name: str):
    from transformers import Qwen2_5_VLConfig

    text = dict(RELEASED[name])
    tie = text.pop("tie")
    return Qwen2_5_VLConfig(
        text_config=dict(**text, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                  "mrope_section": [16, 24, 24]}),
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                           out_hidden_size=text["hidden_size"], fullatt_block_indexes=[7, 15, 23, 31],
                           window_size=112),
        tie_word_embeddings=tie,
    )


def _cell(facts, training, gpu_bytes: int, need_gib: float) -> str:
    from olmocr_rl.model.colocate_memory import check_fit

    common = dict(gpu_bytes=gpu_bytes, max_model_length=MAX_MODEL_LENGTH, engine_dtype="bfloat16", training=training)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    table = rows()
    print(json.dumps(table, indent=2) if parser.parse_args().json else markdown(table))


if __name__ == "__main__":
    main()
