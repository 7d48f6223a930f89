"""WeightBase: the weights an adapter update merges into, named by the pusher and checked by the holder.

An adapter push is right only on the base it was trained on. A server that restarted holds the
weights it loaded, and one that took a full update from someone else holds theirs: either would
merge the adapter into a model nobody trained, under a version number the trainer trusts. So the
base is named, by the server process that holds it (its boot id; "" in-process) and the version the
update that set it committed (0: the weights loaded); a holder of another base refuses, writing nothing.

An update whose adapters merge into the held base (LoRA factors without their module's weight) must
name it; every other update replaces the base with its own version.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rollout.weights.lora import LoraTargets, target_weight
from rollout.weights.manifest import WeightUpdateError, hf_name

# In the text of every refusal for another base, whatever carries it (a gRPC status, a group handshake).
BASE_MISMATCH = "adapter update refused for another base, nothing written"


@dataclass(frozen=True, slots=True)
class WeightBase:
    """A base: the weights held by server process `boot_id` ("" in-process) since `version` (0: as loaded)."""

    boot_id: str
    version: int

    def __str__(self) -> str:
        where = f" of server process {self.boot_id}" if self.boot_id else ""
        return f"base version {self.version}{where}"


class BaseMismatchError(RuntimeError):
    """An adapter update named a base other than the one held; nothing was written."""

    def __init__(self, named: WeightBase, held: WeightBase) -> None:
        self.named, self.held = named, held
        super().__init__(
            f"{BASE_MISMATCH}: it applies to {named}; held here: {held} (a restart, or a full update since); "
            'push the base weights first (a PEFT model: lora="full")'
        )

    def __reduce__(self) -> tuple:
        """Pickled as its two bases, so it crosses process boundaries (Ray fleets) as itself."""
        return (BaseMismatchError, (self.named, self.held))


def relies_on_held_base(names: Iterable[str], lora: LoraTargets | None) -> bool:
    """True when an update's adapters merge into the base held: a LoRA target whose weight it does not carry."""
    if not lora:
        return False
    sent = {hf_name(name) for name in names}
    return any(target_weight(module, target) not in sent for module, target in lora.items())


def check_base(named: WeightBase | None, held: WeightBase, relies: bool) -> None:
    """Refuses an update that `relies` on the held base but names another (BaseMismatchError) or none
    (WeightUpdateError naming the field `base`). An update that does not rely on it replaces it: a
    base it names is not checked."""
    if not relies:
        return
    if named is None:
        raise WeightUpdateError(
            "weight update refused, nothing written: base: an update whose LoRA factors merge into the "
            f"held base (a module's factors without its weight) must name that base (held here: {held})"
        )
    if named != held:
        raise BaseMismatchError(named, held)


def is_base_refusal(why: str) -> bool:
    """Whether a failure's text (a status's details, a group refusal) is a refusal for another base."""
    return BASE_MISMATCH in why
