"""A fake fleet front for the client's rank ranges: one gRPC address that takes `RANKS` group ranks.

Run as `python -m tests.weights.fake_fleet_front`: prints its address, serves until stdin closes.
Each rank is a member holding tiny_model(seed=0)'s tensors; GetServerInfo answers weight_group_ranks
and, in `model`, each member's digest of its tensors (what the test compares with what it pushed).
A member refuses a manifest whose names it does not hold, as a replica would, and the last member
refuses version 99 (one rank of the address says no while the other says ready).
"""

from __future__ import annotations

import hashlib
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import grpc
import torch

from rollout.protocol.generated import rollout_pb2, rollout_pb2_grpc, weights_pb2, weights_pb2_grpc
from rollout.protocol.weights_wire import GROUP_BACKENDS, manifest_from_proto
from rollout.weights.buckets import receive_buckets
from rollout.weights.group import GroupSpec, WeightGroup
from tests.builders import tiny_model

RANKS = 2


def digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode() + tensors[name].detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Member:
    def __init__(self) -> None:
        self.tensors = {n: t.detach().clone() for n, t in tiny_model(seed=0).state_dict().items()}
        self.group: WeightGroup | None = None
        self.version = 0

    def receive(self, request: weights_pb2.UpdateWeightsFromGroupRequest, last: bool) -> None:
        manifest = manifest_from_proto(request.manifest)
        unknown = [s.name for s in manifest.tensors if s.name not in self.tensors]
        refusal = f"unknown tensors {unknown}" if unknown else None
        if last and request.options.version == 99:
            refusal = "the last member refuses version 99"
        self.group.report_ready(request.update_id, refusal)
        if refusal:
            raise ValueError(refusal)
        if not self.group.wait_go(request.update_id):
            raise RuntimeError("called off")
        received = receive_buckets(self.group, manifest, request.bucket_bytes)
        self.tensors.update({n: t.clone() for n, t in received.items()})
        self.version += 1


class FakeFront(rollout_pb2_grpc.RolloutServiceServicer, weights_pb2_grpc.WeightSyncServiceServicer):
    def __init__(self) -> None:
        self.members = [Member() for _ in range(RANKS)]
        self.pool = ThreadPoolExecutor(RANKS)

    def GetServerInfo(self, request, context):
        model = json.dumps([digest(m.tensors) for m in self.members])
        return rollout_pb2.GetServerInfoResponse(model=model, weight_group_ranks=RANKS)

    def InitWeightGroup(self, request, context):
        if request.num_ranks != RANKS:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"num_ranks {request.num_ranks} != {RANKS}")
        specs = [
            GroupSpec(
                request.master_addr,
                request.master_port,
                request.world_size,
                request.rank + i,
                GROUP_BACKENDS[request.backend],
                request.timeout_s or 60,
            )
            for i in range(RANKS)
        ]
        groups = list(self.pool.map(WeightGroup.join, specs))
        for member, group in zip(self.members, groups, strict=True):
            member.group = group
        return weights_pb2.InitWeightGroupResponse()

    def UpdateWeightsFromGroup(self, request, context):
        futures = [self.pool.submit(m.receive, request, i == RANKS - 1) for i, m in enumerate(self.members)]
        errors = [str(f.exception()) for f in futures if f.exception() is not None]
        if errors:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "; ".join(errors))
        return weights_pb2.UpdateWeightsFromGroupResponse(weight_version=self.members[0].version)


def main() -> None:
    server = grpc.server(ThreadPoolExecutor(8))
    front = FakeFront()
    rollout_pb2_grpc.add_RolloutServiceServicer_to_server(front, server)
    weights_pb2_grpc.add_WeightSyncServiceServicer_to_server(front, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"127.0.0.1:{port}", flush=True)
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
