"""OlmoRL's GRPOConfig values, the settings that contradict them, the trainer's refusal of a plain config and
its group plan (the training itself: tests/integration/test_olmorl_trainer.py)."""

from __future__ import annotations

import pytest
import torch

from olmocr_rl.trainer.olmorl import (
    OlmoRLGRPOTrainer,
    check_olmorl_settings,
    olmorl_config_overrides,
    olmorl_group_plan,
)

def test_overrides_are_what_olmorl_means():
    o = olmorl_config_overrides()
    assert (o["loss_type"], o["scale_rewards"], o["epsilon"], o["epsilon_high"], o["beta"]) == (
        "dapo", "none", 0.2, 0.272, 0.0)
    o["beta"] = 1.0
    assert olmorl_config_overrides()["beta"] == 0.0  # a fresh dict each call


def test_user_settings_that_contradict_olmorl_are_named():
    check_olmorl_settings({"beta": 0.0, "scale_rewards": False, "learning_rate": 1e-6})  # agreeing or unrelated
    with pytest.raises(ValueError) as err:
        check_olmorl_settings({"beta": 0.04, "loss_type": "bnpo", "epsilon": 0.2}, source="the command line")
    message = str(err.value)
    assert "the command line" in message
    assert "beta=0.04" in message and "loss_type='bnpo'" in message
    assert "epsilon=" not in message.replace("epsilon_high", "")  # 0.2 agrees
    assert "drop --olmorl" in message


def test_trainer_refuses_a_plain_grpo_config(tmp_path):
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, num_generations=2,
                      per_device_train_batch_size=2, **{**olmorl_config_overrides(), "beta": 0.1})
    with pytest.raises(ValueError, match=r"beta=0.1: --olmorl needs beta=0.0"):
        OlmoRLGRPOTrainer(model="unused-never-loaded", reward_funcs=[], args=args)
    with pytest.raises(ValueError, match="olmorl_config_overrides"):
        OlmoRLGRPOTrainer(model="unused-never-loaded", reward_funcs=[])


def test_group_plan_drops_zero_signal_and_unscorable_groups():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.0, 1.0, 0.0, 0.0])
    unscorable = torch.tensor([False, False, False, False, False, True, False, False])
    adv, keep = olmorl_group_plan(rewards, unscorable, G=2)
    assert keep.tolist() == [True, True, False, False, False, False, False, False]
    assert adv.tolist() == [0.5, -0.5, 0, 0, 0, 0, 0, 0]
    adv, keep = olmorl_group_plan(rewards, unscorable, G=1)  # eval with one generation: no signal at all
    assert not keep.any() and (adv == 0).all()
