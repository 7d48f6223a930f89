"""Sampler replay: the server's sampling step recomputed on a trainer's logits, so a trainer gets the logprob
of each sampled token under the very distribution it was drawn from (rollout/replay/sampler_replay.py).

- replay_rows.py: a finished sample -> the sampler's rows, one per token (settings, history, grammar mask);
- processed_distribution.py: those rows applied to logits with the sampler's own functions, differentiably;
- sampler_replay.py: `SamplerReplay`, the public face (docs/engine_api.md, "Sampler replay").
"""

from rollout.replay.sampler_replay import SamplerReplay

__all__ = ["SamplerReplay"]
