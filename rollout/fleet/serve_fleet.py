"""ServeFleet: N engine replicas as a Ray Serve deployment behind one OpenAI-compatible endpoint.

`ServeFleet(replicas=2, serve_args=[...]).start()` (Ray started locally when none is running) deploys
EngineReplica x N with CacheAffinityRouter and FleetIngress on Ray Serve's HTTP proxy at
`base_url` and, with `grpc_port`, the fleet's one gRPC address `grpc_address` (grpc_front.py: a
RolloutClient on it works as on one server); `client()` is a RolloutClient on that address (without
one: over the replicas' own addresses). `update_weights` pushes to every replica atomically
(fleet_update.py; over torch.distributed with this process as rank 0: group_push.py); `sleep`/`wake_up`/
`is_sleeping` fan out (fleet_sleep.py); `metrics()` is the fleet's.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Sequence
from typing import Any

import httpx
import ray
from ray import serve
from ray.serve.config import RequestRouterConfig

from rollout.client import RolloutClient
from rollout.fleet.affinity_router import CacheAffinityRouter
from rollout.fleet.engine_replica import EngineReplica, ReplicaSpec
from rollout.fleet.fleet_payload import FleetPayload
from rollout.fleet.fleet_sleep import fleet_state, sleep_fleet, sleep_states, wake_fleet
from rollout.fleet.fleet_update import push_to_fleet
from rollout.fleet.group_push import FleetGroup, GroupOptions
from rollout.fleet.grpc_front import FrontSpec
from rollout.fleet.ingress import ingress_deployment
from rollout.fleet.replica_calls import Targeted
from rollout.fleet.replica_names import DEPLOYMENT, live_replicas
from rollout.fleet.weight_ledger import NAMESPACE, start_ledger

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
FLEET_TRANSPORTS = ("ray", "disk", "distributed")


class ServeFleet:
    """`serve_args`: `rollout serve` model and engine flags for every replica (no ports, host or
    token: the fleet sets them). `openai_port` 0 picks a free one; `grpc_port`: the fleet's gRPC address
    (None: none, 0: a free port). `round_robin`: route without
    affinity (a baseline). `ray_init`: kwargs for the local Ray started when none is running."""

    def __init__(
        self,
        replicas: int,
        serve_args: Sequence[str] = (),
        openai_port: int = 8000,
        grpc_port: int | None = None,
        host: str = "127.0.0.1",
        token: str | None = None,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        app_name: str = "rollout-fleet",
        round_robin: bool = False,
        imbalanced_threshold: int = 8,
        torch_threads: int = 1,
        **ray_init: Any,
    ) -> None:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
        for owned in ("--port", "--host", "--token", "--openai-port"):
            if owned in serve_args:
                raise ValueError(f"serve_args: {owned} is set by the fleet")
        if host not in _LOOPBACK and not token:
            raise ValueError(f"token: required when the fleet binds {host!r} (it accepts weight updates)")
        self.num_replicas, self.host, self.token, self.app_name = replicas, host, token, app_name
        self.openai_port = openai_port or _free_port(host)
        self.grpc_port = grpc_port if grpc_port is None else grpc_port or _free_port(host)
        self.spec = ReplicaSpec(list(serve_args), host, token, f"{app_name}-ledger", torch_threads)
        self.resources = {"num_cpus": num_cpus, "num_gpus": num_gpus}
        self.router_kwargs = {"round_robin": round_robin, "imbalanced_threshold": imbalanced_threshold}
        self._ray_init = ray_init
        self._started_ray = False
        self._ledger: Any = None
        self._group: FleetGroup | None = None
        self.handle: Any = None

    def start(self) -> ServeFleet:
        if not ray.is_initialized():
            ray.init(**{"include_dashboard": False, **self._ray_init})
            self._started_ray = True
        try:
            self._ledger = start_ledger(self.spec.ledger)
            serve.start(http_options={"host": self.host, "port": self.openai_port})
            self.handle = serve.run(self._application(), name=self.app_name, route_prefix="/")
        except BaseException:
            self.shutdown()
            raise
        self.handle = serve.get_deployment_handle(DEPLOYMENT, app_name=self.app_name)
        return self

    def _application(self) -> Any:
        replica = serve.deployment(
            EngineReplica,
            name=DEPLOYMENT,
            num_replicas=self.num_replicas,
            ray_actor_options=self.resources,
            max_ongoing_requests=1024,
            health_check_period_s=2.0,
            request_router_config=RequestRouterConfig(
                request_router_class=CacheAffinityRouter,
                request_router_kwargs=self.router_kwargs,
                request_routing_stats_period_s=1.0,
            ),
        )
        front = None
        if self.grpc_port is not None:
            front = FrontSpec(self.grpc_port, self.host, self.app_name, self.spec.ledger, self.token)
        ingress = ingress_deployment(self.app_name, 0, self.token, self.spec.ledger, front)
        return ingress.bind(replica.bind(self.spec))

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.openai_port}/v1"

    def replicas(self) -> list[str]:
        """The live replicas' ids."""
        return live_replicas(self.app_name)

    def describe(self) -> list[dict[str, Any]]:
        """Each live replica's id, actor name, gRPC address, pid and weight version."""
        return [self.handle.describe.remote(Targeted(r)).result(timeout_s=120) for r in self.replicas()]

    def wait_for_replicas(self, timeout_s: float = 600.0) -> list[dict[str, Any]]:
        """Waits until `replicas` replicas are live and answer (after one died: its replacement)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                described = self.describe()
                if len(described) == self.num_replicas:
                    return described
            except Exception:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.num_replicas} replicas were not live within {timeout_s:g} s")
            time.sleep(0.5)

    @property
    def grpc_addresses(self) -> list[str]:
        """The replicas' own gRPC addresses."""
        return [d["grpc_address"] for d in self.describe()]

    @property
    def grpc_address(self) -> str | None:
        """The fleet's one gRPC address (None without `grpc_port`)."""
        if self.grpc_port is None:
            return None
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"{host}:{self.grpc_port}"

    def client(self, **kwargs: Any) -> RolloutClient:
        """A RolloutClient on the fleet's gRPC address, else over the replicas' (kwargs: its options)."""
        return RolloutClient(self.grpc_address or self.grpc_addresses, token=self.token, **kwargs)

    # ---- sleep mode, fleet-wide (fleet_sleep.py) -------------------------------------------------

    def sleep(self, level: int = 1, abort_running: bool = False) -> int:
        """Every replica sleeps, or none does (FleetSleepError naming the one that refused)."""
        return sleep_fleet(self.handle, self.replicas, self._ledger, level, abort_running, self._auth())

    def wake_up(self, tags: list[str] | None = None) -> None:
        wake_fleet(self.handle, self.replicas, self._ledger, tags, self._auth())

    def is_sleeping(self) -> bool:
        """True only when every replica sleeps (`sleep_states()`: each one's)."""
        return fleet_state(self.sleep_states()).is_sleeping

    def sleep_states(self) -> dict[str, Any]:
        """Each live replica's IsSleepingResponse, by replica id."""
        return sleep_states(self.handle, self.replicas(), self._auth())

    def _auth(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def update_weights(
        self,
        model_or_named_tensors: Any = None,
        version: int | None = None,
        in_flight: str = "wait",
        lora: Any = None,
        path: str | None = None,
        transport: str | None = None,
        **kwargs: Any,
    ) -> int:
        """One push to every replica, atomic across the fleet (fleet_update.py); returns the version.

        As `RolloutClient.update_weights`: a PEFT model sends its adapter (`lora="adapter"`, its
        default; "full": base and adapter), merged on each replica's held base; tensors with LoRA
        factors take `lora={module: LoraTarget}`. `transport`: "ray" (the default: the tensors as one
        object in Ray's store), "disk" (`path`: a safetensors directory every replica reads; tensors
        given too are written there first) or "distributed" (a torch.distributed broadcast from this
        process, rank 0, to every replica: kwargs `bucket_bytes` and, for the group's first set-up,
        those of `init_weight_group`; the group is kept for the next pushes).
        """
        from rollout.weights.disk import save_checkpoint
        from rollout.weights.lora_export import update_source
        from rollout.weights.manifest import unique_named_tensors

        transport = transport or ("disk" if path is not None else "ray")
        if transport not in FLEET_TRANSPORTS:
            raise ValueError(f"transport must be one of {FLEET_TRANSPORTS}, got {transport!r}")
        if (path is not None) != (transport == "disk"):
            raise ValueError(f"path: given with the disk transport and only then (transport {transport!r})")
        if model_or_named_tensors is None and path is None:
            raise ValueError("model_or_named_tensors: required unless path names a checkpoint directory")
        if kwargs and transport != "distributed":
            raise TypeError(f"unexpected arguments for the {transport} transport: {sorted(kwargs)}")
        tensors, targets = None, lora
        if model_or_named_tensors is not None:
            source, targets = update_source(model_or_named_tensors, lora)
            if transport == "distributed":
                return self._group_push(
                    list(unique_named_tensors(source)), version, in_flight, targets, kwargs
                )
            tensors = {n: t.detach().cpu().contiguous() for n, t in unique_named_tensors(source)}
        if path is not None:
            if tensors is not None:
                save_checkpoint(tensors, path)
            payload = FleetPayload(path=str(path), lora=targets)
        else:
            payload = FleetPayload(ref=ray.put(tensors), lora=targets)
        return push_to_fleet(self.handle, self.replicas, self._ledger, payload, version, in_flight)

    def init_weight_group(
        self,
        master_addr: str = "127.0.0.1",
        master_port: int = 0,
        backend: str = "gloo",
        timeout_s: float = 120.0,
        device: Any = None,
    ) -> None:
        """Sets up the torch.distributed group of distributed pushes: this process is rank 0 and hosts
        its store at `master_addr` (this machine's address as the replicas reach it; port 0: a free
        one), the live replicas join as ranks 1..N. gloo for CPU tensors, nccl for CUDA ones."""
        options = GroupOptions(master_addr, master_port, backend, timeout_s, device)
        self._fleet_group().init(options)

    def close_weight_group(self) -> None:
        """Leaves the group here and on every replica (the next distributed push sets one up again)."""
        if self._group is not None:
            self._group.close()

    def _fleet_group(self) -> FleetGroup:
        if self._group is None:
            self._group = FleetGroup(self.handle, self.replicas, self._ledger)
        return self._group

    def _group_push(
        self, named: list[Any], version: int | None, in_flight: str, lora: Any, kwargs: dict[str, Any]
    ) -> int:
        push_keys = {"bucket_bytes"}  # the rest set the group up (timeout_s: the group's, as a client's)
        group = self._fleet_group()
        init = {k: v for k, v in kwargs.items() if k not in push_keys}
        if init and group.group is None:  # a group kept (or its options, to set it up again) wins
            self.init_weight_group(**init)
        push = {k: v for k, v in kwargs.items() if k in push_keys}
        return group.push(named, version, in_flight, lora, **push)

    def kill_replica(self, replica: str) -> None:
        """Kills one replica's process (as a crash would); Ray Serve starts a replacement."""
        name = f"SERVE_REPLICA::{self.app_name}#{DEPLOYMENT}#{replica}"
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)

    def metrics(self) -> str:
        """The fleet's Prometheus text (fleet_metrics.py)."""
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.get(self.base_url.removesuffix("/v1") + "/metrics", headers=headers, timeout=60).text

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):  # the replicas may be gone already: the group dies with them
            self.close_weight_group()
        try:
            if ray.is_initialized():
                serve.shutdown()
        finally:
            if self._ledger is not None:
                ray.kill(self._ledger)
                self._ledger = None
            if self._started_ray:
                ray.shutdown()
                self._started_ray = False

    def __enter__(self) -> ServeFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host if host not in ("0.0.0.0", "::") else "", 0))
        return sock.getsockname()[1]


__all__ = ["NAMESPACE", "ServeFleet"]
