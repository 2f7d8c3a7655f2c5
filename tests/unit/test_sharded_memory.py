"""The preflight's per-GPU arithmetic under ZeRO-2, ZeRO-3 and FSDP2 (model.colocate_memory.sharded_trainer_bytes),
hand-worked, and docs/scaling.md's multi-GPU fit rows as scripts/bench/fit_table.py --sharded prints them. The same
arithmetic against the bytes each CPU process holds: tests/integration/test_sharded_cpu.py."""

from __future__ import annotations

import importlib.util

import pytest

from olmocr_rl.model.colocate_memory import (
    GIB, ModelFacts, Training, check_fit, engine_from_environment, sharded_trainer_bytes, trainer_bytes)
from conftest import REPO_ROOT

FACTS = ModelFacts(parameters=1000, kv_bytes_per_token_per_dtype_byte=0, vision_tower_parameters=100,
                   lora_parameters=10, lora_saved_parameters=0)


def test_sharded_bytes_hand_worked():
    full, ref, frozen = Training(), Training(reference_model=True), Training(freeze_vision_tower=True)
    # ZeRO-2: bf16 weights whole (2 x 1000) + (bf16 gradient 2 + fp32 master and moments 12) x 1000 / 4
    assert sharded_trainer_bytes(FACTS, full, engine="zero2", processes=4) == 2000 + 3500
    assert sharded_trainer_bytes(FACTS, ref, engine="zero2", processes=4) == 4000 + 3500  # the reference whole
    # ZeRO-3 / FSDP2: 16 bytes a trained parameter, 2 a frozen one or a reference weight, all over N
    for engine in ("zero3", "fsdp2"):
        assert sharded_trainer_bytes(FACTS, full, engine=engine, processes=4) == 16000 // 4
        assert sharded_trainer_bytes(FACTS, ref, engine=engine, processes=4) == (16000 + 2000) // 4
        assert sharded_trainer_bytes(FACTS, frozen, engine=engine, processes=4) == (16 * 900 + 2 * 100) // 4
    # fp32 (the CPU runs): a frozen weight takes 4 bytes
    assert sharded_trainer_bytes(FACTS, frozen, engine="fsdp2", processes=2, mixed_precision=False) == (
        16 * 900 + 4 * 100) // 2
    # LoRA: the adapters train (16 bytes), the base is frozen, no reference model
    assert sharded_trainer_bytes(FACTS, Training(use_peft=True), engine="zero3", processes=2) == (160 + 2000) // 2
    # DDP (or one process) keeps the one-process floor
    assert sharded_trainer_bytes(FACTS, ref, engine="ddp", processes=8) == trainer_bytes(FACTS, ref)
    with pytest.raises(ValueError, match="engine 'zero1'"):
        sharded_trainer_bytes(FACTS, full, engine="zero1", processes=2)


def test_engine_from_accelerate_environment():
    assert engine_from_environment({}) == "ddp"
    assert engine_from_environment({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}) == "zero3"
    assert engine_from_environment({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}) == "zero2"
    assert engine_from_environment({"ACCELERATE_USE_FSDP": "true"}) == "fsdp2"


def test_check_fit_takes_the_sharded_trainer_floor():
    common = dict(gpu_bytes=80 * GIB, utilization=0.2, max_model_length=0, engine_dtype="bfloat16",
                  single_process=False)
    assert check_fit(FACTS, **common) is None  # several processes, no engine given: the trainer is not checked
    line = check_fit(FACTS, trainer_need_bytes=70 * GIB, **common)
    assert line is not None and "the trainer needs at least 70.0 GiB" in line
    assert check_fit(FACTS, trainer_need_bytes=60 * GIB, **common) is None


def test_docs_scaling_has_the_sharded_fit_rows():
    spec = importlib.util.spec_from_file_location("fit_table_sharded", REPO_ROOT / "scripts" / "bench" / "fit_table.py")
    fit_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_table)
    table = fit_table.sharded_rows()
    rows = [line for line in fit_table.sharded_markdown(table).splitlines() if line.startswith("| Qwen")]
    assert len(rows) == 12  # 4 (model, mode, GPUs) x ZeRO-2 / ZeRO-3 / FSDP2
    docs = (REPO_ROOT / "docs" / "scaling.md").read_text()
    for row in rows:
        assert row in docs, f"docs/scaling.md lacks this row of fit_table.py --sharded:\n{row}"
    eight = {r["engine"]: r for r in table if r["model"].startswith("Qwen3-VL-8B")}
    assert eight["ZeRO-3"]["trainer_gib"] == eight["FSDP2"]["trainer_gib"] < eight["ZeRO-2"]["trainer_gib"]
    assert eight["ZeRO-2"]["colocated"].startswith("fits")
    moe16 = [r for r in table if r["gpus"] == 16 and r["engine"] == "ZeRO-3" and "full" in r["mode"]][0]
    assert moe16["server"] == "fits" and moe16["colocated"].startswith("does not fit")
