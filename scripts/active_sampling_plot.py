"""Plot and summarise scripts/active_sampling_demo.sh: python scripts/active_sampling_plot.py OUT WARM_MODEL."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def per_sample_pass_rate(path: Path) -> float:
    """Passed (test, sample) pairs / all pairs (finer than the bench's majority vote over samples)."""
    tests = json.loads(path.read_text())["tests"].values()
    return sum(t["repeat_passes"] for t in tests) / sum(t["repeats"] for t in tests)


def main(out: Path, warm: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def evaluated(name: str) -> float:
        rates = [per_sample_pass_rate(p) for p in sorted(out.glob(f"eval-{name}-*.json"))]
        return sum(rates) / len(rates)

    start = evaluated(Path(warm).name)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    print(f"warm start: per-sample pass rate {start:.4f}")
    for mode, label in (("off", "OlmoRL"), ("on", "OlmoRL + active sampling")):
        records = [json.loads(line) for line in (out / mode / "metrics.jsonl").read_text().splitlines()]
        records = [r for r in records if "reward" in r]
        steps = [r["step"] for r in records]
        reward = [r["reward"] for r in records]
        tokens, total = [], 0.0
        for r in records:
            total += r["timing/generated_tokens"]
            tokens.append(total / 1000)
        signal = [r.get("active_sampling/groups_kept", 1.0 - r["olmorl/frac_groups_dropped"]) for r in records]
        smooth = [sum(reward[max(0, i - 9): i + 1]) / len(reward[max(0, i - 9): i + 1]) for i in range(len(reward))]
        axes[0].plot(steps, smooth, label=label)
        axes[1].plot(tokens, smooth, label=label)
        axes[2].plot(steps, [sum(signal[: i + 1]) for i in range(len(signal))], label=label)
        final = evaluated(mode)
        step_s = sum(r["timing/step_s"] for r in records)
        print(f"{label}: steps {len(records)}, steps with a signal group {sum(1 for s in signal if s > 0)}, "
              f"generated tokens {total:.0f}, train time {step_s:.1f} s, "
              f"extra rounds {sum(r.get('active_sampling/rounds', 0) for r in records):.0f}; "
              f"per-sample pass rate {start:.4f} -> {final:.4f} (gain {final - start:+.4f}; "
              f"{(final - start) / len(records) * 1000:+.2f}e-3 per step, "
              f"{(final - start) / total * 1e6:+.2f}e-6 per generated token)")
    axes[0].set(xlabel="optimizer step", ylabel="training reward (mean of last 10 steps)")
    axes[1].set(xlabel="generated tokens (thousands)", ylabel="training reward (mean of last 10 steps)")
    axes[2].set(xlabel="optimizer step", ylabel="groups with signal trained on (cumulative)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("CPU demo: OlmoRL with and without active sampling, same warm start")
    fig.tight_layout()
    target = Path("docs/img/active_sampling.png")
    fig.savefig(target, dpi=80)
    print(f"wrote {target}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
