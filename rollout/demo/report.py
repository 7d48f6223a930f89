"""What the demo shows: one table row per round, a closing verdict, and the reward curve as a PNG."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HEADER = (
    f"{'round':>5} {'version':>7} {'reward':>7} {'greedy acc':>10} {'tokens/s':>9} "
    f"{'gen s':>6} {'sync s':>7} {'train s':>7} {'|dlogp|':>8}"
)


@dataclass(frozen=True)
class RoundStats:
    """One GRPO round: reward of the sampled groups, held-out greedy accuracy, timings, versions."""

    round: int
    weight_version: int
    reward: float  # mean binary reward of the round's samples (temperature 1)
    accuracy: float  # exact-answer rate of greedy decoding on the held-out prompts
    tokens_per_s: float  # completion tokens generated / generate wall time
    generate_s: float
    sync_s: float  # update_weights wall time (push + commit), before this round's generation
    train_s: float
    logprob_drift: float  # mean |logp_trainer - logp_server| over the round's tokens

    def row(self) -> str:
        return (
            f"{self.round:>5} {self.weight_version:>7} {self.reward:>7.3f} {self.accuracy:>10.3f} "
            f"{self.tokens_per_s:>9.0f} {self.generate_s:>6.2f} {self.sync_s:>7.3f} {self.train_s:>7.2f} "
            f"{self.logprob_drift:>8.1e}"
        )


def summary(history: list[RoundStats], window: int = 3) -> str:
    """First and final reward (mean of the first/last `window` rounds) and greedy accuracy."""
    k = max(1, min(window, len(history) // 2))
    first = sum(r.reward for r in history[:k]) / k
    final = sum(r.reward for r in history[-k:]) / k
    return (
        f"reward: first {first:.3f} -> final {final:.3f} ({final - first:+.3f}; means of {k} rounds)\n"
        f"greedy accuracy: first {history[0].accuracy:.3f} -> final {history[-1].accuracy:.3f}\n"
        f"weight version: {history[0].weight_version} -> {history[-1].weight_version}"
    )


def compare(sync: list[RoundStats], sync_s: float, overlapped: list[RoundStats], overlapped_s: float) -> str:
    """The synchronous and the overlapped run side by side: wall time, then reward per round."""
    lines = [
        f"wall time: sync {sync_s:.1f} s, async {overlapped_s:.1f} s ({sync_s / overlapped_s:.2f}x)",
        f"{'round':>5} {'sync reward':>11} {'async reward':>12} {'async versions':>14}",
    ]
    for a, b in zip(sync, overlapped, strict=True):
        lines.append(f"{a.round:>5} {a.reward:>11.3f} {b.reward:>12.3f} {b.weight_version:>14}")
    k = max(1, min(3, len(sync) // 2))
    for name, run in (("sync", sync), ("async", overlapped)):
        first, final = (sum(r.reward for r in part) / k for part in (run[:k], run[-k:]))
        lines.append(f"{name} reward: first {first:.3f} -> final {final:.3f} ({final - first:+.3f})")
    return "\n".join(lines)


def plot(history: list[RoundStats], path: Path, overlapped: list[RoundStats] | None = None) -> Path | None:
    """Reward and greedy accuracy per round, as a PNG; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rounds = [r.round for r in history]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(rounds, [r.reward for r in history], marker="o", label="reward (samples, T=1)")
    ax.plot(rounds, [r.accuracy for r in history], marker="s", label="greedy accuracy (held out)")
    if overlapped:
        ax.plot(rounds, [r.reward for r in overlapped], marker="^", label="reward, async (lag 1)")
    ax.set_xlabel("GRPO round")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("rollout demo: GRPO on the embedded addition model")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
