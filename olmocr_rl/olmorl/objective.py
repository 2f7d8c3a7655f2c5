"""The OlmoRL objective (OLMo 3 report §4.4.1) as pure functions.

Three changes to GRPO, each a function here, each taking numpy arrays or torch tensors and returning the
same kind (torch stays differentiable):

1. ``group_advantages``      reward minus its group mean; no division by the group std for OlmoRL.
2. ``nonzero_signal_groups`` which groups of G samples carry any learning signal (not all rewards equal).
3. ``olmorl_objective``      PPO's clipped surrogate with clip-higher (ε_low 0.2, ε_high 0.272),
                             averaged over *tokens* of all answers (no per-answer mean, no length bias).

Worked numbers (docs/design.md, "The OlmoRL objective, with worked numbers")::

    >>> group_advantages(np.array([1., 0., 0., 1.]), G=4, normalize_std=False)
    array([ 0.5, -0.5, -0.5,  0.5])

No I/O, no globals, no torch.distributed: the trainer (``trainer/olmorl.py``) does the plumbing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # torch is a project dependency, but the maths stays usable on numpy alone
    import torch
except ImportError:  # pragma: no cover - torch is always installed in this project
    torch = None

STD_EPS = 1e-6
"""Added to the group std before dividing (original GRPO only), so a zero-std group gives 0, not NaN."""

from olmocr_rl.olmorl.settings import EPS_HIGH, EPS_LOW  # noqa: E402  (OLMo 3's clip range, defined once)

__all__ = [
    "EPS_HIGH",
    "EPS_LOW",
    "STD_EPS",
    "clipped_token_terms",
    "group_advantages",
    "nonzero_signal_groups",
    "olmorl_objective",
]


def _is_torch(x: Any) -> bool:
    return torch is not None and isinstance(x, torch.Tensor)


def _same_kind(**arrays: Any) -> bool:
    """True if every argument is a torch tensor, False if none is; a mix is a caller error."""
    kinds = {name: _is_torch(a) for name, a in arrays.items()}
    if len(set(kinds.values())) > 1:
        described = ", ".join(f"{n}={'torch' if t else 'numpy'}" for n, t in kinds.items())
        raise TypeError(f"olmorl: pass all numpy arrays or all torch tensors, got a mix ({described})")
    return next(iter(kinds.values()))


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape)


def _float_rewards(rewards: Any, name: str = "rewards") -> Any:
    """Rewards as a 1-D floating array of the caller's kind; rejects other shapes and NaN/inf."""
    if _is_torch(rewards):
        r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
        finite = bool(torch.isfinite(r).all())
    else:
        r = np.asarray(rewards)
        r = r if np.issubdtype(r.dtype, np.floating) else r.astype(np.float64)
        finite = bool(np.isfinite(r).all())
    if r.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (P*G,), got shape {_shape(r)}")
    if not finite:
        # A NaN would silently poison its group's mean; TRL marks unscorable completions NaN, and the
        # trainer must decide what to do with them before calling the maths.
        raise ValueError(f"{name} contain NaN or inf; replace or drop unscorable completions first")
    return r


def _grouped(rewards: Any, G: int) -> Any:
    """Reshape flat (P*G,) rewards to (P, G) after checking G."""
    if isinstance(G, bool) or not isinstance(G, (int, np.integer)):
        raise ValueError(f"G (samples per group) must be an int, got {G!r}")
    if G < 2:
        raise ValueError(f"G (samples per group) must be >= 2 for a group baseline, got G={G}")
    r = _float_rewards(rewards)
    n = r.shape[0]
    if n == 0 or n % G != 0:
        raise ValueError(
            f"rewards of shape ({n},) cannot be split into groups of G={G}: "
            f"the length must be a positive multiple of G (P pages x G samples, consecutive per page)"
        )
    return r.reshape(n // G, G)


def group_advantages(rewards: Any, G: int, normalize_std: bool) -> Any:
    """Advantage of each sample relative to its group of G samples.

    Args:
        rewards: shape (P*G,), numpy or torch; the G samples of each page are consecutive.
        G: samples per group (>= 2).
        normalize_std: False for OlmoRL (reward - group mean). True for original GRPO, which also
            divides by (group std + 1e-6).

    Returns:
        Advantages of shape (P*G,), same kind (numpy/torch) and float dtype as ``rewards``.

    The std is the *population* std (divide by G, ddof=0): the worked numbers in docs/design.md fix it,
    (1,0,0,1) -> (1,-1,-1,1) needs std 0.5, which is the population std of that group (the sample std
    would be 0.577 and give ±0.87). A group whose rewards are all identical gets exactly 0 (not a
    rounding residue), with or without std normalisation.

    Raises:
        ValueError: rewards not 1-D, length not a positive multiple of G, G < 2, or NaN/inf rewards.
    """
    grouped = _grouped(rewards, G)
    # Subtracting the group's first reward before averaging changes nothing mathematically but makes
    # identical rewards give exactly 0 (the mean of G copies of x is not always exactly x in floats).
    shifted = grouped - grouped[:, :1]
    if _is_torch(grouped):
        centred = shifted - shifted.mean(dim=1, keepdim=True)
        if normalize_std:
            centred = centred / (shifted.std(dim=1, unbiased=False, keepdim=True) + STD_EPS)
    else:
        centred = shifted - shifted.mean(axis=1, keepdims=True)
        if normalize_std:
            centred = centred / (shifted.std(axis=1, ddof=0, keepdims=True) + STD_EPS)
    return centred.reshape(-1)


def nonzero_signal_groups(rewards: Any, G: int) -> Any:
    """Which groups carry a learning signal.

    Args:
        rewards: shape (P*G,), numpy or torch; the G samples of each page are consecutive.
        G: samples per group (>= 2).

    Returns:
        Boolean of shape (P,), same kind as ``rewards``: True where the group's G rewards are not all
        identical. Equality is exact on the float rewards (the bench reward is a pass fraction, so
        "all equal" rather than "mean in (0, 1)"); rewards differing by one ulp count as different.

    Raises:
        ValueError: as for ``group_advantages``.
    """
    grouped = _grouped(rewards, G)
    differs = grouped != grouped[:, :1]
    return differs.any(dim=1) if _is_torch(grouped) else differs.any(axis=1)


def _check_eps(eps_low: float, eps_high: float) -> None:
    if not 0.0 <= eps_low < 1.0:
        raise ValueError(f"eps_low must be in [0, 1) so that 1 - eps_low > 0, got {eps_low}")
    if eps_high < 0.0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high}")


def _check_token_shapes(logp_new: Any, logp_old: Any, adv: Any, mask: Any) -> None:
    if len(_shape(logp_new)) != 2:
        raise ValueError(f"logp_new must be 2-D (N answers, T tokens), got shape {_shape(logp_new)}")
    n, t = _shape(logp_new)
    if _shape(logp_old) != (n, t):
        raise ValueError(f"logp_old must have the shape of logp_new {(n, t)}, got {_shape(logp_old)}")
    if _shape(mask) != (n, t):
        raise ValueError(f"mask must have the shape of logp_new {(n, t)}, got {_shape(mask)}")
    if _shape(adv) != (n,):
        raise ValueError(f"adv must be 1-D with one advantage per answer, shape ({n},), got {_shape(adv)}")


def clipped_token_terms(
    logp_new: Any, logp_old: Any, adv: Any, mask: Any, eps_low: float = EPS_LOW, eps_high: float = EPS_HIGH
) -> Any:
    """Per-token clipped surrogate min(ρA, clip(ρ, 1-ε_low, 1+ε_high)A), zero on padding.

    Shapes and kinds as for ``olmorl_objective``; returns shape (N, T). Padding tokens (mask 0) give
    exactly 0 and no gradient, even if their log-probs are inf/NaN.
    """
    is_torch = _same_kind(logp_new=logp_new, logp_old=logp_old, adv=adv, mask=mask)
    if not is_torch:
        logp_new, logp_old, adv, mask = (np.asarray(x) for x in (logp_new, logp_old, adv, mask))
    _check_token_shapes(logp_new, logp_old, adv, mask)
    _check_eps(eps_low, eps_high)
    if is_torch:
        real = mask != 0
        # Zero the log-ratio on padding *before* exp, so garbage there cannot reach the sum or the
        # gradient (a NaN in the unselected branch of `where` still poisons the backward pass).
        logratio = torch.where(real, logp_new - logp_old, torch.zeros_like(logp_new))
        ratio = torch.exp(logratio)
        a = adv.to(ratio.dtype)[:, None]
        term = torch.minimum(ratio * a, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * a)
        return torch.where(real, term, torch.zeros_like(term))
    real = mask != 0
    with np.errstate(invalid="ignore"):  # inf - inf on padding is discarded just below
        logratio = np.where(real, logp_new - logp_old, 0.0)
    ratio = np.exp(logratio)
    a = np.asarray(adv, dtype=ratio.dtype)[:, None]
    term = np.minimum(ratio * a, np.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * a)
    return np.where(real, term, 0.0)


def olmorl_objective(
    logp_new: Any, logp_old: Any, adv: Any, mask: Any, eps_low: float = EPS_LOW, eps_high: float = EPS_HIGH
) -> Any:
    """Token-level clipped surrogate objective, to be *maximised* (a trainer minimises its negative).

    Args:
        logp_new: (N, T) log-probs of the sampled tokens under the policy being trained.
        logp_old: (N, T) log-probs under the policy that sampled them (ρ = exp(logp_new - logp_old)).
        adv: (N,) one advantage per answer, broadcast over its tokens.
        mask: (N, T) 1/True for real tokens, 0/False for padding (any non-zero counts as real).
            To drop zero-signal groups, zero their rows here: they then leave both the sum and the
            token count.
        eps_low, eps_high: clip range [1 - eps_low, 1 + eps_high] (OLMo 3: 0.2 and 0.272).

    Returns:
        sum over real tokens of min(ρA, clip(ρ, 1-ε_low, 1+ε_high)A), divided by the number of real
        tokens: a 0-d torch tensor (differentiable w.r.t. logp_new) or a numpy float.

    Raises:
        ValueError: shapes that do not match the above, eps out of range, or a mask with no real token.
        TypeError: numpy and torch mixed.
    """
    terms = clipped_token_terms(logp_new, logp_old, adv, mask, eps_low, eps_high)
    n_real = int((mask != 0).sum()) if _is_torch(mask) else int((np.asarray(mask) != 0).sum())  # a host sync in torch, the price of the all-padding error
    if n_real == 0:
        raise ValueError(
            f"mask of shape {_shape(mask)} has no real token (all padding or all groups dropped); "
            "the token-level mean is undefined"
        )
    if _is_torch(terms):
        return terms.sum() / n_real
    return terms.dtype.type(terms.sum() / n_real)
