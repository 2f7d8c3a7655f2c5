"""Property tests of the OlmoRL maths (hypothesis): invariants that must hold for any batch."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from olmocr_rl.olmorl import group_advantages, nonzero_signal_groups, olmorl_objective

FAST = settings(max_examples=60, deadline=None)

# Pass fractions like the bench reward's: few distinct values, so identical groups occur often.
pass_fraction = st.sampled_from([0.0, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 1.0])
any_reward = st.floats(-10, 10, allow_nan=False, width=64)


@st.composite
def grouped_rewards(draw, reward=pass_fraction):
    G = draw(st.integers(2, 6))
    P = draw(st.integers(1, 5))
    rewards = np.array(draw(st.lists(reward, min_size=P * G, max_size=P * G)))
    return rewards, G


@st.composite
def token_batch(draw):
    """A batch of P groups of G answers: log-probs, a padding mask with >=1 real token per answer, rewards."""
    rewards, G = draw(grouped_rewards())
    n = rewards.shape[0]
    t = draw(st.integers(1, 6))
    logp_old = draw(arrays(np.float64, (n, t), elements=st.floats(-5, 0)))
    logratio = draw(arrays(np.float64, (n, t), elements=st.floats(-0.5, 0.5)))
    lengths = np.array(draw(st.lists(st.integers(1, t), min_size=n, max_size=n)))
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)
    return rewards, G, logp_old + logratio, logp_old, mask


@FAST
@given(grouped_rewards(any_reward), st.booleans())
def test_advantages_sum_to_zero_per_group(data, normalize):
    rewards, G = data
    adv = group_advantages(rewards, G, normalize)
    scale = 1.0 if not normalize else 1e-6 + np.abs(adv).max()
    np.testing.assert_allclose(adv.reshape(-1, G).sum(1), 0.0, atol=1e-9 * scale * (1 + np.abs(rewards).max()))


@FAST
@given(grouped_rewards(any_reward), st.booleans())
def test_numpy_and_torch_agree(data, normalize):
    rewards, G = data
    np_adv = group_advantages(rewards, G, normalize)
    torch_adv = group_advantages(torch.from_numpy(rewards), G, normalize)
    np.testing.assert_allclose(torch_adv.numpy(), np_adv, rtol=1e-9, atol=1e-9)
    assert (nonzero_signal_groups(torch.from_numpy(rewards), G).numpy() == nonzero_signal_groups(rewards, G)).all()


@FAST
@given(grouped_rewards())
def test_zero_signal_groups_are_exactly_the_groups_with_zero_advantages(data):
    rewards, G = data
    keep = nonzero_signal_groups(rewards, G)
    all_zero = (group_advantages(rewards, G, False).reshape(-1, G) == 0).all(1)
    assert (keep == ~all_zero).all()


@FAST
@given(token_batch(), st.data())
def test_dropped_groups_contribute_nothing_to_value_or_gradient(batch, data):
    rewards, G, logp_new, logp_old, mask = batch
    keep = np.repeat(nonzero_signal_groups(rewards, G), G)
    if not keep.any():
        return  # nothing left to average: covered by the all-padding error test
    adv = group_advantages(rewards, G, False)
    kept_mask = mask * keep[:, None]

    # Scribble over the dropped rows (their log-probs and advantages): nothing may change.
    noise = data.draw(arrays(np.float64, logp_new.shape, elements=st.floats(-3, 3)))
    logp_scribbled = np.where(keep[:, None], logp_new, logp_new + noise)
    adv_scribbled = np.where(keep, adv, adv + 7.0)

    lp = torch.tensor(logp_new, requires_grad=True)
    lp_s = torch.tensor(logp_scribbled, requires_grad=True)
    value = olmorl_objective(lp, torch.tensor(logp_old), torch.tensor(adv), torch.tensor(kept_mask))
    value_s = olmorl_objective(lp_s, torch.tensor(logp_old), torch.tensor(adv_scribbled), torch.tensor(kept_mask))
    value.backward()
    value_s.backward()
    assert value.item() == value_s.item()
    assert (lp.grad.numpy()[~keep] == 0).all()
    assert (lp_s.grad.numpy()[~keep] == 0).all()
    np.testing.assert_array_equal(lp.grad.numpy(), lp_s.grad.numpy())

    # ... and the normaliser counts kept tokens only: the value equals the kept rows' objective alone
    alone = olmorl_objective(logp_new[keep], logp_old[keep], adv[keep], mask[keep])
    np.testing.assert_allclose(value.item(), alone, rtol=1e-12, atol=1e-15)


@FAST
@given(token_batch(), st.floats(0.0, 0.5))
def test_ratio_one_symmetric_eps_gives_mean_token_advantage(batch, eps):
    rewards, G, _, logp_old, mask = batch
    adv = group_advantages(rewards, G, False)
    value = olmorl_objective(logp_old, logp_old, adv, mask, eps_low=eps, eps_high=eps)
    token_advantages = np.broadcast_to(adv[:, None], mask.shape)[mask == 1]
    np.testing.assert_allclose(value, token_advantages.mean(), rtol=1e-9, atol=1e-12)


@FAST
@given(token_batch())
def test_objective_numpy_equals_torch_and_never_exceeds_unclipped(batch):
    rewards, G, logp_new, logp_old, mask = batch
    adv = group_advantages(rewards, G, False)
    np_value = olmorl_objective(logp_new, logp_old, adv, mask)
    t_value = olmorl_objective(*(torch.from_numpy(x) for x in (logp_new, logp_old, adv, mask)))
    np.testing.assert_allclose(t_value.item(), np_value, rtol=1e-9, atol=1e-12)
    # clipping is a pessimistic bound: the objective never exceeds the plain importance-weighted one
    unclipped = (np.exp(logp_new - logp_old) * adv[:, None] * mask).sum() / mask.sum()
    assert np_value <= unclipped + 1e-12
