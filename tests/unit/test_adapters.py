"""LoRA (``--use_peft``): flags and their checks, adapters on the language model only, the vLLM weight sync's
out-of-place merge (TRL's values and names, the base untouched), adapter folders as models (evaluate, soup),
checkpoint kinds, and the memory preflight's LoRA and frozen-tower arithmetic."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from argparse import Namespace
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from olmocr_rl.config import ConfigError, Environment, parse_args, validate
from olmocr_rl.config.flags import CHOSEN, LORA_TARGET_MODULES
from olmocr_rl.config import checks
from olmocr_rl.model.adapters import AdapterError, adapter_plan, merged_named_parameters
from olmocr_rl.model.colocate_memory import GIB, Training, check_fit, model_facts, trainer_bytes

from conftest import REPO_ROOT

CPU = Environment(cuda=False, vllm=False, num_processes=1)


def flags(**given) -> Namespace:
    return Namespace(**{**vars(parse_args([])), **given, CHOSEN: frozenset(given)})


# --- flags -------------------------------------------------------------------------------------------------

def test_lora_defaults_are_trls_but_dropout():
    a = parse_args([])
    assert (a.use_peft, a.lora_r, a.lora_alpha, a.lora_dropout) == (False, 16, 32, 0.0)
    assert a.lora_target_modules == list(LORA_TARGET_MODULES) and a.lora_modules_to_save is None
    assert a.save_merged is True and a.freeze_vision_tower is False and a.freeze_vision_merger is False
    assert a.cache_vision_features is True
    given = parse_args(["--use_peft", "--lora_target_modules", "q_proj", "v_proj", "--lora_modules_to_save", "merger"])
    assert given.lora_target_modules == ["q_proj", "v_proj"] and given.lora_modules_to_save == ["merger"]


def test_lora_lists_in_a_config_file(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("use_peft: true\nlora_target_modules: [q_proj, k_proj]\nlora_modules_to_save: merger\n")
    a = parse_args(["--config", str(config)])
    assert a.lora_target_modules == ["q_proj", "k_proj"] and a.lora_modules_to_save == ["merger"]
    result = subprocess.run([sys.executable, "-m", "olmocr_rl.config", "--print", "lora_target_modules", "--config",
                             str(config)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == '["q_proj", "k_proj"]', result.stderr


@pytest.mark.parametrize(("given", "problem"), [
    (dict(lora_r=8), "--lora_r only applies to LoRA training; add --use_peft (or drop --lora_r)"),
    (dict(use_peft=True, lora_r=0), "--lora_r must be >= 1 (got 0)"),
    (dict(use_peft=True, lora_dropout=1.0), "--lora_dropout must be in [0, 1) (got 1.0)"),
    (dict(use_peft=True, lora_target_modules=["model.layers.0.q_proj"]),
     "--lora_target_modules 'model.layers.0.q_proj': expected a module name such as q_proj"),
    (dict(use_peft=True, lora_target_modules=["q_proj", "lm_head"]),
     "--lora_target_modules lm_head: TRL computes log-probs from lm_head's own weight directly"),
    (dict(use_peft=True, lora_modules_to_save=["lm_head"]),
     "--lora_modules_to_save lm_head: TRL computes log-probs from lm_head's own weight directly, so neither an "
     "adapter nor a trained copy of it would ever train"),
    (dict(use_peft=True, freeze_vision_merger=True, lora_modules_to_save=["merger"]),
     "--freeze_vision_merger and --lora_modules_to_save merger contradict each other"),
])
def test_adapter_flag_problems(given, problem):
    found = checks.check_adapters(flags(**given), set(given))
    assert found and found[0].startswith(problem), found


def test_adapter_flags_pass_and_say_what_they_do(tmp_path):
    assert checks.check_adapters(flags(use_peft=True, lora_target_modules=["all-linear"]), {"use_peft"}) == []
    notices = checks.adapter_notices(flags(use_peft=True, freeze_vision_tower=True), {"use_peft"})
    assert notices[0].startswith("--use_peft: LoRA r=16 alpha=32 on the language model's q_proj k_proj")
    assert "already leaves the vision tower frozen" in notices[1]
    bench = tmp_path / "bench"
    (bench / "pdfs").mkdir(parents=True)
    args = parse_args(["--train_bench_data_folder", str(bench), "--reward_bench", "--num_generations", "2",
                       "--gradient_accumulation_steps", "2", "--lora_alpha", "8"])
    with pytest.raises(ConfigError, match="--lora_alpha only applies to LoRA training"):
        validate(args, CPU)


# --- adapters on the language model only ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from olmocr_rl.model.loading import load_model_and_processor

    return load_model_and_processor(str(tiny_model_dir))


def test_adapters_go_on_the_language_model_only(tiny):
    model, _ = tiny
    plan = adapter_plan(model, r=4, alpha=8, dropout=0.0, target_modules=LORA_TARGET_MODULES)
    matched = [name for name, _ in model.named_modules() if re.fullmatch(plan.lora_config.target_modules, name)]
    assert len(matched) == plan.adapted_layers == 2 * 7  # 2 layers x q k v o gate up down
    assert all(name.startswith("model.language_model.layers.") for name in matched)
    assert any(name.startswith("model.visual.") and name.endswith("gate_proj") for name, _ in model.named_modules())
    assert plan.adapter_parameters == sum(4 * (m.in_features + m.out_features)
                                          for name, m in model.named_modules() if name in matched)
    every = adapter_plan(model, r=4, alpha=8, dropout=0.0, target_modules=["all-linear"])
    assert every.adapted_layers == 14  # every linear layer of the language model is a projection here; no lm_head
    with pytest.raises(AdapterError, match="--lora_target_modules qkv: the language model has no linear layer of "
                                           "that name; its linear layers are down_proj, gate_proj, k_proj"):
        adapter_plan(model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "qkv"])
    with pytest.raises(AdapterError, match="--lora_modules_to_save projector: the model has no module"):
        adapter_plan(model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj"], modules_to_save=["projector"])
    saved = adapter_plan(model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj"], modules_to_save=["merger"])
    assert saved.saved_parameters == sum(p.numel() for p in model.model.visual.merger.parameters())
    tied = copy.deepcopy(model)
    tied.config.tie_word_embeddings = True  # the 3B model ties them
    with pytest.raises(AdapterError, match="--lora_modules_to_save embed_tokens: this model ties its input embedding"):
        adapter_plan(tied, r=4, alpha=8, dropout=0.0, target_modules=["q_proj"], modules_to_save=["embed_tokens"])


def _peft(model, dtype, modules_to_save=None, seed=0):
    from peft import get_peft_model

    plan = adapter_plan(model, r=4, alpha=8, dropout=0.0, target_modules=LORA_TARGET_MODULES,
                        modules_to_save=modules_to_save)
    wrapped = get_peft_model(copy.deepcopy(model).to(dtype), plan.lora_config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # trained adapters: B is no longer zero, the saved merger moved
        for name, param in wrapped.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                param.add_(0.05 * torch.randn(param.shape, generator=generator).to(param.dtype))
    return wrapped


def _trls_sync(peft_model):
    """TRL 1.16's own weight sync for a PEFT model on one process: merge in place, read, unmerge."""
    from trl.generation.vllm_generation import VLLMGeneration

    fake = SimpleNamespace(model=peft_model, _dist=SimpleNamespace(gather_params=lambda params: nullcontext(),
                                                                    is_fsdp=False))
    fake._fix_param_name_to_vllm = lambda name, extra_prefixes=None: VLLMGeneration._fix_param_name_to_vllm(
        fake, name, extra_prefixes)
    return {name: value.clone() for name, value in VLLMGeneration._iter_named_params(fake)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sync_sends_trls_merged_weights_and_leaves_the_base_alone(tiny, dtype):
    model, _ = tiny
    ours_model = _peft(model, dtype, modules_to_save=["merger"])
    trls_model = copy.deepcopy(ours_model)
    base_before = {n: p.clone() for n, p in ours_model.get_base_model().named_parameters()}
    ours = {name: value.clone() for name, value in merged_named_parameters(ours_model)}
    theirs = _trls_sync(trls_model)
    # the names vLLM loads: the model's own parameter names without PEFT
    assert list(ours) == list(theirs) == [n for n, _ in model.named_parameters()]
    assert all(torch.equal(ours[n], theirs[n]) for n in ours)  # bit for bit TRL's merged values
    assert not torch.equal(ours["model.language_model.layers.0.self_attn.q_proj.weight"],
                           base_before["model.language_model.layers.0.self_attn.q_proj.base_layer.weight"])
    assert torch.equal(ours["model.visual.merger.mlp.0.weight"],
                       dict(ours_model.named_parameters())[
                           "base_model.model.model.visual.merger.modules_to_save.default.mlp.0.weight"])
    after = dict(ours_model.get_base_model().named_parameters())
    assert all(torch.equal(after[n], base_before[n]) for n in base_before)  # ours: the base never changes
    moved = [n for n, p in trls_model.get_base_model().named_parameters() if not torch.equal(p, base_before[n])]
    # TRL's merge + unmerge rounds the frozen base, by an ulp in fp32, by a bf16 step in bf16 (TRL #6688)
    assert len(moved) == 14 and all("base_layer" in n for n in moved)
    print(f"{dtype}: TRL's in-place merge/unmerge changed {len(moved)} base tensors; ours none")


def test_the_vllm_backend_always_uses_the_out_of_place_merge_gathering_sharded_weights(tiny, monkeypatch):
    import contextlib
    import sys

    from trl.generation.vllm_generation import VLLMGeneration

    from olmocr_rl.trainer.vllm_generation import _generation_class

    generation = object.__new__(_generation_class())  # no engine: only the weight iteration is exercised
    generation.model = _peft(tiny[0], torch.float32)
    names = [n for n, _ in tiny[0].named_parameters()]
    generation.accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None))
    assert [name for name, _ in generation._iter_named_params()] == names
    monkeypatch.setattr(VLLMGeneration, "_iter_named_params", lambda self: iter([("trl", None)]))
    unsharded = list(generation._iter_named_params())
    assert unsharded[0][0] != "trl"
    # FSDP2: the merged values of the shards, gathered whole (full_tensor where a value is a DTensor)
    generation.accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=object()))
    fsdp = list(generation._iter_named_params())
    assert [n for n, _ in fsdp] == names and all(torch.equal(a, b) for (_, a), (_, b) in zip(fsdp, unsharded))
    # ZeRO-3: every partition gathered for the walk (deepspeed.zero.GatheredParameters), never TRL's merge
    gathered = []

    @contextlib.contextmanager
    def gathered_parameters(params):
        gathered.append(len(params))
        yield

    fake = SimpleNamespace(zero=SimpleNamespace(GatheredParameters=gathered_parameters))
    monkeypatch.setitem(sys.modules, "deepspeed", fake)
    generation.accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=3)))
    zero3 = list(generation._iter_named_params())
    assert [n for n, _ in zero3] == names and gathered == [len(list(generation.model.parameters()))]


# --- adapter folders as models -------------------------------------------------------------------------------

def _adapter_folder(tiny, tiny_model_dir, folder, seed):
    from olmocr_rl.model.adapters import set_adapter_base_name

    wrapped = _peft(tiny[0], torch.float32, seed=seed)
    wrapped.save_pretrained(folder)
    set_adapter_base_name(folder, str(tiny_model_dir))
    return wrapped


def test_an_adapter_folder_loads_merged_onto_its_base(tiny, tiny_model_dir, tmp_path):
    from olmocr_rl.evaluate import check_model_path
    from olmocr_rl.model.adapters import load_policy, write_merged
    from olmocr_rl.model.loading import ModelLoadError, load_model_and_processor

    wrapped = _adapter_folder(tiny, tiny_model_dir, tmp_path / "adapter", seed=1)
    check_model_path(str(tmp_path / "adapter"))  # evaluate takes it, and loads it merged
    from olmocr_rl.evaluate import load_model

    evaluated, _ = load_model(str(tmp_path / "adapter"), "cpu")
    assert type(evaluated).__name__ == "Qwen2_5_VLForConditionalGeneration" and not evaluated.training
    merged, processor = load_policy(str(tmp_path / "adapter"))
    assert type(merged).__name__ == "Qwen2_5_VLForConditionalGeneration" and processor.tokenizer is not None
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    torch.testing.assert_close(merged(input_ids=ids).logits, wrapped(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    folder = write_merged(tmp_path / "adapter", tmp_path / "merged")
    again, _ = load_model_and_processor(str(folder))
    assert torch.equal(again(input_ids=ids).logits, merged(input_ids=ids).logits)
    assert torch.equal(evaluated(input_ids=ids).logits, merged(input_ids=ids).logits)
    with pytest.raises(ModelLoadError, match="holds a LoRA adapter, not a model; train from a full model folder"):
        load_model_and_processor(str(tmp_path / "adapter"))
    (tmp_path / "orphan").mkdir()
    (tmp_path / "orphan" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "x")}))
    with pytest.raises(AdapterError, match="is a LoRA adapter of .*x, which cannot be loaded"):
        load_policy(str(tmp_path / "orphan"))


def test_soup_merges_each_adapter_onto_its_base_before_averaging(tiny, tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    from olmocr_rl.model.adapters import write_merged
    from olmocr_rl.soup import main

    for seed in (1, 2):
        _adapter_folder(tiny, tiny_model_dir, tmp_path / f"adapter{seed}", seed=seed)
    assert main([str(tmp_path / "adapter1"), str(tmp_path / "adapter2"), str(tmp_path / "soup")]) == 0
    merged = [load_file(write_merged(tmp_path / f"adapter{s}", tmp_path / f"m{s}") / "model.safetensors") for s in (1, 2)]
    soup = load_file(tmp_path / "soup" / "model.safetensors")
    assert soup.keys() == merged[0].keys()
    for name in soup:  # the average of the merged models, not a model of averaged adapters
        assert torch.equal(soup[name], ((merged[0][name].float() + merged[1][name].float()) / 2).to(soup[name].dtype))
    assert not any(p.name.startswith(".soup.merged") for p in tmp_path.iterdir())  # temporary merges removed
    assert (tmp_path / "soup" / "config.json").is_file()


def test_checkpoint_kind_mismatch_is_named_before_loading(tmp_path):
    from olmocr_rl.trainer.adapter_checkpoint import kind_mismatch

    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "adapter_config.json").write_text("{}")
    (tmp_path / "full").mkdir()
    assert kind_mismatch(str(tmp_path / "lora"), True) is None and kind_mismatch(str(tmp_path / "full"), False) is None
    assert "holds a LoRA adapter and this run trains the full model (no --use_peft)" in kind_mismatch(
        str(tmp_path / "lora"), False)
    assert "holds a full model and this run trains LoRA adapters (--use_peft)" in kind_mismatch(
        str(tmp_path / "full"), True)


# --- the memory preflight ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen7b():
    from conftest import released_qwen25_vl_config

    return model_facts(released_qwen25_vl_config("7b"))


def test_trainer_floor_with_lora_and_a_frozen_tower(qwen7b):
    facts = qwen7b
    assert facts.vision_tower_parameters == 631_975_680 and facts.vision_merger_parameters == 44_574_464
    # r 16 on q k v o gate up down of 28 layers: 16 x (in + out) each
    per_layer = 16 * ((3584 + 3584) * 2 + (3584 + 512) * 2 + (3584 + 18944) * 3)
    assert facts.lora_parameters == 28 * per_layer == 40_370_176
    full = trainer_bytes(facts, Training(reference_model=True))
    assert full == 10 * facts.parameters
    frozen = trainer_bytes(facts, Training(freeze_vision_tower=True, reference_model=True))
    assert full - frozen == 6 * facts.vision_tower_parameters
    lora = trainer_bytes(facts, Training(use_peft=True))
    assert lora == 2 * facts.parameters + 16 * facts.lora_parameters
    assert round(lora / GIB, 1) == 16.0


def test_7b_lora_fits_one_80_gib_gpu_beside_colocated_vllm(qwen7b):
    common = dict(gpu_bytes=80 * GIB, max_model_length=5628, engine_dtype="bfloat16")
    line = check_fit(qwen7b, utilization=0.15, training=Training(use_peft=True), **common)
    assert line.startswith("--vllm_gpu_memory_utilization 0.15 gives vLLM 12.0 GiB of the 80.0 GiB GPU, but the "
                           "colocated vLLM engine needs 17.7 GiB")
    assert line.endswith("use --vllm_gpu_memory_utilization 0.23 (leaving 61.6 GiB to the trainer, which needs 16.0 GiB)")
    assert check_fit(qwen7b, utilization=0.23, training=Training(use_peft=True), **common) is None
    # the full fine-tune does not fit, and the refusal names LoRA with its number (a frozen tower is not enough)
    line = check_fit(qwen7b, utilization=0.23, training=Training(reference_model=True), **common)
    assert "the trainer needs at least 77.2 GiB (bf16 weights, gradients and AdamW state and the reference model" in line
    assert "train less of the model: --use_peft (the trainer then needs 16.0 GiB); or give vLLM GPUs" in line
    assert "--freeze_vision_tower" not in line
    # where freezing the tower is enough, it is named too
    line = check_fit(qwen7b, utilization=0.23, training=Training(), gpu_bytes=78 * GIB, max_model_length=5628,
                     engine_dtype="bfloat16")
    assert "--use_peft (the trainer then needs 16.0 GiB) or --freeze_vision_tower (the trainer then needs 58.3 GiB)" in line
    assert "\n" not in line


def test_the_documented_fit_table_is_the_preflights_arithmetic():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fit_table", REPO_ROOT / "scripts" / "bench" / "fit_table.py")
    fit_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_table)  # the script's own table, in this process (transformers is loaded already)
    rows = [line for line in fit_table.markdown(fit_table.rows()).splitlines() if line.startswith("| Qwen")]
    assert len(rows) == 11  # Qwen2.5-VL-3B/7B and Qwen3-VL-8B x 3 modes, Qwen3-VL-30B-A3B x 2 (no default LoRA)
    page = (REPO_ROOT / "docs" / "scaling.md").read_text()  # "1 GPU": the table the README links to
    for row in rows:
        assert row in page, f"docs/scaling.md's fit table lacks this row of scripts/bench/fit_table.py:\n{row}"
    lora_7b = next(row for row in rows if row.startswith("| Qwen2.5-VL-7B") and "--use_peft" in row)
    assert "| 17.7 GiB | 16.0 GiB | fits at `--vllm_gpu_memory_utilization 0.23` |" in lora_7b
