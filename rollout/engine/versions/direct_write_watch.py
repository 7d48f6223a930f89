"""Notices weights written straight into `engine.model`, so the prefix cache never serves stale KV.

The prefix cache keys blocks by weight version, and only `update_weights` (or
`commit_weight_version()` after a write) moves the version on; a bare write into the model leaves
blocks computed with the old weights matching. Every in-place tensor op bumps the tensor's version
counter (`Tensor._version`, what autograd checks), so a grown sum over the parameters with no
commit since means such a write. Writes through `.data` bypass the counters and are not seen.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


class DirectWriteWatch:
    """Call `check(engine)` before a batch is queued; it commits a new version after a bare write."""

    def __init__(self, model: torch.nn.Module, weight_version: int) -> None:
        self._params = list(model.parameters())
        self._seen = (weight_version, self._stamp())

    def _stamp(self) -> int:
        return sum(p._version for p in self._params)  # counters only grow: any write raises the sum

    def check(self, engine) -> None:  # noqa: ANN001 - LLMEngine (import cycle)
        stamp = self._stamp()
        if stamp != self._seen[1] and engine.weight_version == self._seen[0]:
            version = engine.commit_weight_version()
            logger.warning(
                "the model's parameters were written without update_weights; committed weight "
                "version %d so no prefix block computed with the old weights is reused (use "
                "llm.update_weights, or call llm.engine.commit_weight_version() after writing)",
                version,
            )
        self.seen(engine.weight_version)

    def seen(self, weight_version: int) -> None:
        """The weights as they are now belong to `weight_version` (after a supported update)."""
        self._seen = (weight_version, self._stamp())
