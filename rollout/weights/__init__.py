"""In-place, versioned, atomic weight updates and their transports (gRPC stream, torch.distributed, disk).

Server side: `manifest` (what an update carries, checked against the model), `updater` (staging
and the in-place commit), and the receivers in `rollout/server/weights_servicer.py`. Trainer side:
`client_push` (`push_weights`, `WeightPusher`; imported on its own, it needs grpc). Protocol and failure semantics: docs/weight_updates.md.
"""

from rollout.weights.manifest import Manifest, TensorSpec, WeightUpdateError
from rollout.weights.updater import apply_named_tensors

__all__ = [
    "Manifest",
    "TensorSpec",
    "WeightUpdateError",
    "apply_named_tensors",
]
