"""OpRecorder: the names of the aten ops a block of code runs, for tests about what work happens."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.ops.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))
