"""The OlmoRL maths against the worked numbers in docs/design.md, on numpy and torch alike."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from olmocr_rl.olmorl import (
    EPS_HIGH,
    EPS_LOW,
    clipped_token_terms,
    group_advantages,
    nonzero_signal_groups,
    olmorl_objective,
)

BACKENDS = ["numpy", "torch"]


def arr(values, backend, dtype=None):
    """The same numbers as a numpy array or a float64 torch tensor."""
    if backend == "torch":
        return torch.tensor(values, dtype=dtype or torch.float64)
    return np.array(values, dtype=dtype or np.float64)


def as_np(x):
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


# docs/design.md, OlmoRL item 1: three G=4 groups, advantages without and with std normalisation (rounded to 2 places
# there; the exact values are k/sqrt(3) for the skewed groups, since their population std is sqrt(3)/4).
S3 = 1 / math.sqrt(3)
ADVANTAGE_ROWS = [
    ((1, 0, 0, 1), (0.5, -0.5, -0.5, 0.5), (1, -1, -1, 1), (1, -1, -1, 1)),
    ((1, 1, 1, 0), (0.25, 0.25, 0.25, -0.75), (0.58, 0.58, 0.58, -1.73), (S3, S3, S3, -3 * S3)),
    ((1, 0, 0, 0), (0.75, -0.25, -0.25, -0.25), (1.73, -0.58, -0.58, -0.58), (3 * S3, -S3, -S3, -S3)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rewards,centred,divided_rounded,divided_exact", ADVANTAGE_ROWS)
def test_group_advantages_design_rows(backend, rewards, centred, divided_rounded, divided_exact):
    r = arr(rewards, backend)
    plain = group_advantages(r, G=4, normalize_std=False)
    scaled = group_advantages(r, G=4, normalize_std=True)
    assert type(plain) is type(r) and type(scaled) is type(r)
    np.testing.assert_allclose(as_np(plain), centred, atol=1e-12)
    np.testing.assert_allclose(as_np(scaled), divided_rounded, atol=0.005)
    # 1e-6 is added to the std, so the exact value is only reached to ~1e-5 relative
    np.testing.assert_allclose(as_np(scaled), divided_exact, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_advantages_rows_in_one_batch_are_independent(backend):
    rewards = [r for row in ADVANTAGE_ROWS for r in row[0]]
    expected = [a for row in ADVANTAGE_ROWS for a in row[1]]
    out = group_advantages(arr(rewards, backend), G=4, normalize_std=False)
    assert out.shape == (12,)
    np.testing.assert_allclose(as_np(out), expected, atol=1e-12)


def test_group_advantages_uses_population_std_not_sample_std():
    # sample std of (1,0,0,1) is 0.577 and would give ±0.866
    out = group_advantages(np.array([1.0, 0.0, 0.0, 1.0]), G=4, normalize_std=True)
    assert abs(out[0] - 1.0) < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_identical_rewards_give_exactly_zero_advantage(backend):
    # 0.1 * 3 / 3 != 0.1 in floats; the shift by the first reward makes the zero exact
    r = arr([0.1, 0.1, 0.1, 0.7, 0.7, 0.7], backend)
    for normalize in (False, True):
        out = as_np(group_advantages(r, G=3, normalize_std=normalize))
        assert (out == 0.0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_advantages_keeps_float32(backend):
    r = arr([1, 0, 0, 1], backend, dtype=torch.float32 if backend == "torch" else np.float32)
    assert group_advantages(r, 4, False).dtype == r.dtype


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_rewards_are_accepted(backend):
    r = torch.tensor([1, 0, 0, 1]) if backend == "torch" else np.array([1, 0, 0, 1])
    np.testing.assert_allclose(as_np(group_advantages(r, 4, False)), [0.5, -0.5, -0.5, 0.5])


# docs/design.md, OlmoRL item 2: groups whose rewards are all identical are dropped; the bench reward is a pass fraction,
# so a group of 0.5s is dropped although its mean lies inside (0, 1).
@pytest.mark.parametrize("backend", BACKENDS)
def test_nonzero_signal_groups_design_example(backend):
    rewards = arr([1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.5], backend)
    keep = nonzero_signal_groups(rewards, G=4)
    assert type(keep) is type(rewards)
    assert keep.shape == (5,)
    assert as_np(keep).dtype == np.bool_
    assert as_np(keep).tolist() == [True, False, False, False, True]


@pytest.mark.parametrize("backend", BACKENDS)
def test_nonzero_signal_groups_is_exact_equality(backend):
    x = 0.3
    rewards = arr([x, np.nextafter(x, 1.0), x, x], backend)
    assert as_np(nonzero_signal_groups(rewards, G=2)).tolist() == [True, False]


# docs/design.md, OlmoRL item 4: answers of 1 and 3 tokens with per-token terms 1.0 and 0.2,0.2,0.2 give
# (1.0 + 0.6) / 4 = 0.4, where a per-answer mean would give (1.0 + 0.2) / 2 = 0.6.
@pytest.mark.parametrize("backend", BACKENDS)
def test_token_level_normalisation_0_4_not_0_6(backend):
    logp = arr([[-1.0, 0.0, 0.0], [-2.0, -0.5, -0.1]], backend)  # ratio 1 everywhere: term = A
    mask = arr([[1, 0, 0], [1, 1, 1]], backend)
    adv = arr([1.0, 0.2], backend)
    value = olmorl_objective(logp, logp, adv, mask)
    assert float(value) == pytest.approx(0.4, abs=1e-12)
    per_answer_mean = as_np(clipped_token_terms(logp, logp, adv, mask)).sum(1) / as_np(mask).sum(1)
    assert per_answer_mean.mean() == pytest.approx(0.6, abs=1e-12)


# docs/design.md, OlmoRL item 3: A > 0 and ratio 1.25: clip-higher (eps_high 0.272) leaves it alone (1.25A, with gradient),
# a symmetric 0.2 clips it to 1.2A with no gradient.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eps_high,term,grad", [(EPS_HIGH, 1.25, 1.25), (0.2, 1.2, 0.0)])
def test_clip_higher_example(backend, eps_high, term, grad):
    A = 2.0
    logp_old = arr([[-1.0]], backend)
    logp_new = arr([[-1.0 + math.log(1.25)]], backend)
    mask = arr([[1]], backend)
    adv = arr([A], backend)
    if backend == "torch":
        logp_new.requires_grad_(True)
    value = olmorl_objective(logp_new, logp_old, adv, mask, eps_low=0.2, eps_high=eps_high)
    assert float(as_np(value)) == pytest.approx(term * A, rel=1e-12)
    if backend == "torch":
        value.backward()
        # d(ρA)/d logp_new = ρA when unclipped; the clipped branch is constant in logp_new
        assert logp_new.grad.item() == pytest.approx(grad * A, rel=1e-12)


def test_default_eps_are_olmo3():
    assert (EPS_LOW, EPS_HIGH) == (0.2, 0.272)
    logp_new = torch.tensor([[math.log(1.25)], [math.log(1.3)]], dtype=torch.float64)
    zeros = torch.zeros(2, 1, dtype=torch.float64)
    # ratio 1.3 > 1.272 is clipped with the defaults, 1.25 is not
    terms = clipped_token_terms(logp_new, zeros, torch.ones(2, dtype=torch.float64), torch.ones(2, 1))
    assert terms[:, 0].tolist() == pytest.approx([1.25, 1.272])


def test_negative_advantage_clipped_below_at_1_minus_eps_low():
    # A < 0, ratio 0.5: min(0.5A, 0.8A) = 0.8A (pessimistic bound) and no gradient
    logp_new = torch.tensor([[math.log(0.5)]], dtype=torch.float64, requires_grad=True)
    value = olmorl_objective(logp_new, torch.zeros(1, 1, dtype=torch.float64), torch.tensor([-1.0]), torch.ones(1, 1))
    value.backward()
    assert value.item() == pytest.approx(-0.8)
    assert logp_new.grad.item() == 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_kind_matches_input(backend):
    logp = arr([[0.0, -1.0]], backend)
    value = olmorl_objective(logp, logp, arr([1.0], backend), arr([[1, 1]], backend))
    if backend == "torch":
        assert isinstance(value, torch.Tensor) and value.dim() == 0
    else:
        assert isinstance(value, np.floating)


def test_bool_mask_and_float32_torch():
    logp = torch.zeros(2, 2, dtype=torch.float32)
    mask = torch.tensor([[True, False], [True, True]])
    value = olmorl_objective(logp, logp, torch.tensor([3.0, 0.0]), mask)
    assert value.dtype == torch.float32
    assert value.item() == pytest.approx(1.0)  # (3 + 0 + 0) / 3


def test_padding_garbage_cannot_leak_into_value_or_gradient():
    logp_new = torch.tensor([[-0.1, float("-inf")], [-0.2, float("nan")]], requires_grad=True)
    logp_old = torch.tensor([[-0.1, float("-inf")], [-0.3, 5.0]])
    mask = torch.tensor([[1, 0], [1, 0]])
    value = olmorl_objective(logp_new, logp_old, torch.tensor([1.0, -1.0]), mask)
    value.backward()
    assert torch.isfinite(value)
    assert torch.isfinite(logp_new.grad).all()
    assert logp_new.grad[:, 1].tolist() == [0.0, 0.0]
    np_value = olmorl_objective(logp_new.detach().numpy(), logp_old.numpy(), np.array([1.0, -1.0]), mask.numpy())
    assert np_value == pytest.approx(value.item())


def test_gradcheck_against_finite_differences():
    gen = torch.Generator().manual_seed(0)
    n, t = 3, 5
    logp_old = -torch.rand(n, t, generator=gen, dtype=torch.float64)
    # ratios in 0.9..1.1 and 1.35..1.5: clear of the kinks at 0.8, 1.0 (A sign) and 1.272
    ratios = torch.cat([0.9 + 0.2 * torch.rand(n, 3, generator=gen), 1.35 + 0.15 * torch.rand(n, 2, generator=gen)], 1)
    logp_new = (logp_old + ratios.double().log()).requires_grad_(True)
    adv = torch.tensor([0.7, -0.4, 1.3], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    assert torch.autograd.gradcheck(lambda lp: olmorl_objective(lp, logp_old, adv, mask), (logp_new,))


def test_analytic_gradient():
    # d/d logp_new of the objective = mask * ρ * A / n_real where unclipped, 0 where clipped
    logp_old = torch.zeros(2, 3, dtype=torch.float64)
    ratio = torch.tensor([[1.1, 1.3, 0.7], [1.1, 1.3, 0.7]], dtype=torch.float64)
    logp_new = ratio.log().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 3)
    olmorl_objective(logp_new, logp_old, adv, mask).backward()
    # A>0: 1.3 clipped (above 1.272); 0.7 unclipped (min picks 0.7A < 0.8A). A<0: 0.7 clipped; 1.3 unclipped.
    expected = torch.tensor([[1.1, 0.0, 0.7], [-1.1, -1.3, 0.0]], dtype=torch.float64) / 6
    torch.testing.assert_close(logp_new.grad, expected)


# ---- errors a caller can make ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_rewards_not_divisible_by_G(backend):
    with pytest.raises(ValueError, match=r"shape \(6,\).*G=4"):
        group_advantages(arr([1, 0, 0, 1, 1, 0], backend), 4, False)
    with pytest.raises(ValueError, match=r"shape \(6,\).*G=4"):
        nonzero_signal_groups(arr([1, 0, 0, 1, 1, 0], backend), 4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("G", [1, 0, -2])
def test_G_below_2(backend, G):
    with pytest.raises(ValueError, match=f"G=.*{G}"):
        group_advantages(arr([1, 0], backend), G, False)
    with pytest.raises(ValueError, match="G"):
        nonzero_signal_groups(arr([1, 0], backend), G)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rewards_wrong_shape_empty_or_nan(backend):
    with pytest.raises(ValueError, match=r"rewards must be 1-D.*\(2, 2\)"):
        group_advantages(arr([[1, 0], [0, 1]], backend), 2, False)
    with pytest.raises(ValueError, match=r"shape \(0,\)"):
        group_advantages(arr([], backend), 2, False)
    with pytest.raises(ValueError, match="NaN"):
        nonzero_signal_groups(arr([1.0, float("nan")], backend), 2)
    with pytest.raises(ValueError, match="G"):
        group_advantages(arr([1, 0], backend), 2.0, False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_objective_shape_errors_name_the_argument(backend):
    ok = arr(np.zeros((2, 3)), backend)
    adv = arr([1.0, 1.0], backend)
    with pytest.raises(ValueError, match=r"logp_new must be 2-D.*\(6,\)"):
        olmorl_objective(arr(np.zeros(6), backend), ok, adv, ok)
    with pytest.raises(ValueError, match=r"logp_old must have the shape of logp_new \(2, 3\), got \(2, 4\)"):
        olmorl_objective(ok, arr(np.zeros((2, 4)), backend), adv, ok)
    with pytest.raises(ValueError, match=r"mask must have the shape of logp_new \(2, 3\), got \(3, 2\)"):
        olmorl_objective(ok, ok, adv, arr(np.zeros((3, 2)), backend))
    with pytest.raises(ValueError, match=r"adv must be 1-D.*\(2,\), got \(2, 1\)"):
        olmorl_objective(ok, ok, arr([[1.0], [1.0]], backend), ok)


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_padding_mask(backend):
    z = arr(np.zeros((2, 3)), backend)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3\) has no real token"):
        olmorl_objective(z, z, arr([1.0, -1.0], backend), z)


def test_mixed_numpy_and_torch_and_bad_eps():
    z = np.zeros((1, 1))
    with pytest.raises(TypeError, match="logp_old=torch"):
        olmorl_objective(z, torch.zeros(1, 1), np.ones(1), np.ones((1, 1)))
    with pytest.raises(ValueError, match="eps_low"):
        olmorl_objective(z, z, np.ones(1), np.ones((1, 1)), eps_low=1.0)
    with pytest.raises(ValueError, match="eps_high"):
        olmorl_objective(z, z, np.ones(1), np.ones((1, 1)), eps_high=-0.1)
