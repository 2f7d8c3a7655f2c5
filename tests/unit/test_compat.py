"""TRL's private surface (olmocr_rl.trainer.compat): the installed stack holds every listed point; removing one
(monkeypatched away) stops a trainer build and the CLI in one line naming it, before any model loads; the
assumptions only data can show (per-process slice, sampler class, batch keys, the training-values tuple) raise
the same way where the data passes."""

from __future__ import annotations

import importlib
import inspect
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from olmocr_rl.trainer import compat
from olmocr_rl.trainer.compat import CompatError

TRL_POINTS = [p for p in compat.SURFACE if not p.vllm]


def _owner_and_attr(target: str):
    module_name, _, qualname = target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, attr = qualname.split(".")
    for part in parents:
        owner = getattr(owner, part)
    return owner, attr


def test_the_installed_stack_holds_every_listed_point():
    assert compat.problems() == []
    compat.require_surface()  # does not raise


def test_every_point_is_complete_and_names_a_pinned_package():
    targets = [p.target for p in compat.SURFACE]
    assert len(targets) == len(set(targets))
    for p in compat.SURFACE:
        assert p.package in compat.PINS and ":" in p.target, p
        assert p.kind in {"override", "wrap", "swap", "subclass", "read", "call", "invariant"}, p
        assert p.used_in and p.why and p.breaks, p
        assert p.vllm or p.package != "vllm", p  # vLLM's own points need vLLM to be checked
    assert compat.point(targets[0]) is compat.SURFACE[0]
    with pytest.raises(KeyError, match="add a Point"):
        compat.point("trl:Nothing")


def test_the_private_names_include_every_overridden_and_read_name():
    names = compat.private_names()
    for name in ("_calculate_rewards", "_generate_and_score_completions", "_get_train_sampler", "_run_epoch",
                 "_load_from_checkpoint", "_metrics", "_logs", "_tokenizer", "_init_vllm", "_supports_onednn",
                 "_custom_ops", "_wandb", "_attn_implementation"):
        assert name in names, name
    assert not any(n.startswith("__") for n in names)


REMOVABLE = [p for p in TRL_POINTS if not p.instance and "#" not in p.target]


@pytest.mark.parametrize("target", [p.target for p in REMOVABLE], ids=[p.name for p in REMOVABLE])
def test_removing_any_listed_name_is_one_line_naming_it_and_the_pin(target, monkeypatch):
    owner, attr = _owner_and_attr(target)
    monkeypatch.delattr(owner, attr)
    found = compat.problems()
    p = compat.point(target)
    assert found and found[0].startswith(f"the pinned {p.package} changed under olmocr_rl: {p.name} "), found
    assert f"pip install {p.package}=={compat.PINS[p.package]}" in found[0]
    assert all("\n" not in line for line in found)
    with pytest.raises(CompatError) as error:
        compat.require_surface()
    assert "\n" not in str(error.value) and p.name in str(error.value)


def test_a_rewritten_call_site_is_found_even_though_the_name_still_exists(monkeypatch):
    """TRL renaming the *call* of an override (so ours is never reached) is what fails silently without this."""
    from trl import GRPOTrainer

    def _prepare_inputs(self, generation_batch):
        return self._generate_and_score_completions_v2(generation_batch)

    monkeypatch.setattr(GRPOTrainer, "_prepare_inputs", _prepare_inputs)
    found = compat.problems()  # the two points that read _prepare_inputs' source: the call, and its buffer index
    assert len(found) == 2
    assert "GRPOTrainer._generate_and_score_completions is not used as relied on: GRPOTrainer._prepare_inputs no " \
           "longer contains `generation_batch = self._generate_and_score_completions(generation_batch)`" in found[0]
    assert "GRPOTrainer._prepare_inputs is not used as relied on" in found[1]


def test_a_changed_signature_is_found(monkeypatch):
    from transformers import Trainer

    def _run_epoch(self, epoch, model, train_dataloader, steps_in_epoch, num_update_steps_per_epoch, **kwargs):
        return None  # epoch and model swapped

    monkeypatch.setattr(Trainer, "_run_epoch", _run_epoch)
    problem = compat.problems()[0]  # the changed point first (others read its source)
    assert ("Trainer._run_epoch takes (epoch, model, train_dataloader, steps_in_epoch, num_update_steps_per_epoch), "
            "expected (model, epoch, train_dataloader, steps_in_epoch, num_update_steps_per_epoch, ...)") in problem
    assert "pip install transformers==5.17.0" in problem


def test_a_batch_key_of_unknown_alignment_in_trls_source_is_found(monkeypatch):
    monkeypatch.setattr(compat, "COMPLETION_ALIGNED_KEYS", compat.COMPLETION_ALIGNED_KEYS - {"old_per_token_logps"})
    [problem] = compat.problems()
    assert "#batch_keys writes batch keys old_per_token_logps that olmocr_rl does not know" in problem


@pytest.mark.parametrize("trainer", ["plain", "olmorl"])
def test_building_a_trainer_with_a_name_removed_fails_in_one_line_before_the_model_loads(trainer, monkeypatch,
                                                                                          tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    from olmocr_rl.olmorl.settings import olmorl_config_overrides
    from olmocr_rl.trainer.olmorl import OlmoRLGRPOTrainer
    from olmocr_rl.trainer.plain import PlainGRPOTrainer

    extra = olmorl_config_overrides() if trainer == "olmorl" else {}
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=2,
                      num_generations=2, **extra)
    cls = OlmoRLGRPOTrainer if trainer == "olmorl" else PlainGRPOTrainer
    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")
    # The model is a name TRL would load first thing: the check must stop the build before that.
    with pytest.raises(CompatError) as error:
        cls(model=str(tmp_path / "no-such-model"), reward_funcs=[lambda **kw: [0.0]], args=args)
    message = str(error.value)
    assert "\n" not in message and "GRPOTrainer._calculate_rewards is missing" in message
    assert "pip install trl==1.16.0" in message


def test_the_cli_stops_in_one_line_naming_the_point_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from conftest import BENCH_DATA_SAMPLE
    from trl import GRPOTrainer

    from olmocr_rl import grpo_train

    def no_loading(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr("olmocr_rl.model.loading.load_model_and_processor", no_loading)
    monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
    code = grpo_train.main([
        "--train_bench_data_folder", str(BENCH_DATA_SAMPLE), "--model_name", str(tmp_path / "model"),
        "--output_dir", str(tmp_path / "out"), "--reward_bench", "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--report_to", "none",
    ])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(err) == 1
    assert err[0].startswith("error: the pinned trl changed under olmocr_rl: GRPOTrainer._generate_and_score_completions "
                             "is missing")
    assert "pip install trl==1.16.0" in err[0]


# ---- the assumptions only data can show -------------------------------------------------------------------


def test_a_sampler_of_another_class_raises_instead_of_falling_back_to_trls_order():
    from trl import GRPOTrainer

    from olmocr_rl.trainer.plain import PlainGRPOTrainer

    class Trainer(PlainGRPOTrainer):
        def __init__(self):  # only the override under test; TRL's sampler replaced by another class
            pass

    with mock.patch.object(GRPOTrainer, "_get_train_sampler",
                           lambda self, dataset=None: torch.utils.data.SequentialSampler(range(4))):
        with pytest.raises(CompatError, match=r"RepeatSampler is not what _get_train_sampler returned "
                                              r"\(torch\.utils\.data\.sampler\.SequentialSampler\)"):
            Trainer()._get_train_sampler()


def test_a_scored_batch_key_of_unknown_alignment_raises_when_rows_are_merged():
    from olmocr_rl.trainer.active_sampling import merge_rows

    batch = {"prompt_ids": torch.ones(1, 2, dtype=torch.long), "completion_ids": torch.ones(1, 3, dtype=torch.long),
             "new_per_token_thing": torch.zeros(1, 3), "a_per_row_value": torch.zeros(1)}
    with pytest.raises(CompatError, match="scored batch holds new_per_token_thing, whose padding side is unknown"):
        merge_rows([batch], [(0, 0)], pad_token_id=0)
    del batch["new_per_token_thing"]  # one value per row has no padding side: merged as it is
    assert merge_rows([batch], [(0, 0)], pad_token_id=0)["a_per_row_value"].tolist() == [0.0]


def _slicer(rank: int, processes: int):
    from olmocr_rl.trainer.olmorl import OlmoRLGRPOTrainer

    fake = SimpleNamespace(accelerator=SimpleNamespace(process_index=rank, num_processes=processes))
    return lambda *args: OlmoRLGRPOTrainer._local_rows(fake, *args)


def test_the_per_process_slice_is_checked_on_the_data():
    ours = torch.tensor([0.5, -0.5, 0.0, 0.0, 0.25, -0.25, 0.0, 0.0])  # 2 processes x 4 rows, G = 2
    keep = torch.tensor([True, True, False, False, True, True, False, False])
    assert _slicer(1, 2)(ours[4:], 8, ours, keep) == slice(4, 8)  # TRL's rows are rows 4..7: they agree
    with pytest.raises(CompatError, match=r"TRL's advantages of process 1's kept rows differ from rows \[4, 8\)"):
        _slicer(1, 2)(ours[:4], 8, ours, keep)  # TRL gave process 1 the first rows
    with pytest.raises(CompatError, match=r"gathered 6 reward rows for 2 process\(es\) of 4 rows"):
        _slicer(0, 2)(ours[:4], 6, ours[:6], keep[:6])


def test_the_slice_check_agrees_with_trls_own_advantages_under_olmorl():
    """TRL's advantage with scale_rewards='none' (reward minus nanmean of the group) equals OlmoRL's on kept rows,
    the premise of the slice check; an unscorable row (NaN) drops its whole group from ours."""
    from olmocr_rl.trainer.olmorl import olmorl_group_plan

    rewards = torch.tensor([1.0, 0.0, 0.3, 0.3, float("nan"), 1.0, 0.2, 0.9])
    unscorable = torch.isnan(rewards)
    ours, keep = olmorl_group_plan(torch.nan_to_num(rewards), unscorable, 2)
    trl = torch.nan_to_num(rewards - torch.nanmean(rewards.view(-1, 2), dim=1).repeat_interleave(2))
    assert keep.tolist() == [True, True, False, False, False, False, True, True]
    assert _slicer(0, 1)(trl, 8, ours, keep) == slice(0, 8)


def test_the_vllm_points_are_checked_only_when_asked(monkeypatch):
    vllm_points = [p for p in compat.SURFACE if p.vllm]
    assert vllm_points and all(p.target.startswith(("trl.", "vllm.")) for p in vllm_points)
    if importlib.util.find_spec("vllm") is None:  # the main lane: the vLLM points cannot be imported here
        assert any("cannot be imported" in line or "is missing" in line for line in compat.problems(vllm=True))
    else:
        assert compat.problems(vllm=True) == []
    assert inspect.signature(compat.require_surface).parameters["vllm"].default is False
