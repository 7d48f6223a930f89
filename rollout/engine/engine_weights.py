"""A weight update that must pass the self-check before it counts (`EngineConfig.self_check_updates`).

New weights can break exactness where the old ones did not (a feature the engine drops but that was
inert at load, such as all-zero attention sinks; weights that overflow the serving dtype). With the
option on, the update is written, the live engine's forward is compared with the model's own (the
load-time self-check, on its own scratch cache: the serving KV cache is untouched), and on a
mismatch the replaced storages are restored from a copy taken before the write. The error then
means what every update error means: nothing changed, the old version still serves.
"""

from __future__ import annotations

from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.self_check import check_runner
from rollout.engine.model_runner import ModelRunner
from rollout.weights.manifest import NamedTensors, WeightUpdateError
from rollout.weights.updater import plan_writes, write


def apply_checked(runner: ModelRunner, named_tensors: NamedTensors, max_model_len: int | None) -> float:
    """Writes the tensors, self-checks the engine, restores the old values on a mismatch.

    Returns the measured relative difference; raises WeightUpdateError (model unchanged) on failure.
    """
    writes = plan_writes(runner.model, named_tensors)
    backup = [(target, target.detach().clone()) for target, _ in writes]  # only what is replaced
    write(writes)
    try:
        return check_runner(runner, max_model_len)
    except UnsupportedModelError as exc:
        write(backup)
        raise WeightUpdateError(f"the update was rolled back: {exc}") from exc
    except BaseException:
        write(backup)
        raise
