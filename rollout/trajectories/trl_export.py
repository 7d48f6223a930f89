"""Episodes -> what a TRL `rollout_func` returns, and what a custom loop trains on.

TRL's GRPOTrainer takes `{"prompt_ids", "completion_ids", "logprobs", "env_mask"}` from a `rollout_func`,
one entry per sample in its order (docs/trl.md, "Logprobs from a rollout_func"): `env_mask` is 1 on the
tokens the model sampled and 0 on those the environment added (TRL's name; it masks them out of the
loss). Each episode must be one sample: a single path of prefix-stable turns, every turn with logprobs.
Anything else is refused naming the episode and the turn, never trained on misaligned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout.trajectories.episode import Episode, TrajectorySample


class TrajectoryError(ValueError):
    """An episode that cannot be trained on exactly as asked (a prefix break, a branch, no logprobs)."""


def episode_sample(episode: Episode) -> TrajectorySample:
    """The episode's one sample; TrajectoryError if it is not a single prefix-stable path with logprobs."""
    if not episode.turns:
        raise TrajectoryError(f"episode {episode.name!r}: no turn was recorded")
    if episode.breaks():
        turn = episode.breaks()[0]
        raise TrajectoryError(
            f"episode {episode.name!r}: turn {turn}'s prompt does not start with an earlier turn's prompt and "
            "completion tokens (the history was re-rendered or edited); send prompt_token_ids (token-in) or "
            "use previous_response_id, or train on episode.samples() piece by piece"
        )
    samples = episode.samples()
    if len(samples) != 1:
        raise TrajectoryError(
            f"episode {episode.name!r}: its turns branch into {len(samples)} paths (n > 1, or turns that "
            "continue the same earlier turn); train on episode.samples()"
        )
    missing = [i for i, t in enumerate(episode.turns) if t.logprobs is None]
    if missing:
        raise TrajectoryError(
            f"episode {episode.name!r}: turn {missing[0]} has no logprobs; record with ask_logprobs=True or "
            "ask for them (chat: logprobs=true; Responses: include=['message.output_text.logprobs'])"
        )
    return samples[0]


def trl_batch(episodes: Sequence[Episode]) -> dict[str, Any]:
    """A `rollout_func`'s return value, one sample per episode in the given order."""
    samples = [episode_sample(e) for e in episodes]
    return {
        "prompt_ids": [s.prompt_ids for s in samples],
        "completion_ids": [s.completion_ids for s in samples],
        "logprobs": [s.logprobs for s in samples],
        "env_mask": [s.env_mask for s in samples],
    }
