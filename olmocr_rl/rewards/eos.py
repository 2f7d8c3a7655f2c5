"""The EOS reward: 1.0 when a completion ends with the tokenizer's end-of-sequence token (olmOCR's EOS reward, docs/rewards.md).

In practice it rewards finishing before ``max_completion_length``: TRL's ``completion_ids`` keep the first
EOS and drop what follows, so a truncated completion ends on some other token.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence


def make_reward_eos(eos_token_id: int | Iterable[int]) -> Callable[..., list[float]]:
    """A TRL reward function named ``reward_eos`` bound to ``eos_token_id`` (one id, or several accepted ids).

    The function scores 1.0 iff a completion's token-id list is non-empty and its last id is an EOS id, else 0.0.
    It needs TRL's ``completion_ids`` keyword and raises ``ValueError`` without it (a wiring error, not data).
    """
    if eos_token_id is None:
        raise ValueError("reward_eos needs the tokenizer's eos_token_id, which is None for this tokenizer")
    eos_ids = frozenset([int(eos_token_id)] if isinstance(eos_token_id, int) else (int(i) for i in eos_token_id))
    if not eos_ids:
        raise ValueError("reward_eos needs at least one EOS token id")

    def reward_eos(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if completion_ids is None:
            raise ValueError("reward_eos needs completion_ids (TRL passes them to every reward function)")
        return [1.0 if len(ids) > 0 and int(ids[-1]) in eos_ids else 0.0 for ids in completion_ids]

    reward_eos.eos_token_ids = eos_ids  # type: ignore[attr-defined]  # visible for logs and tests
    return reward_eos
