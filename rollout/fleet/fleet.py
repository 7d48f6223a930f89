"""Fleet: M rollout servers placed as Ray actors, and a RolloutClient over all of them.

Each server is an ordinary `rollout serve` process started by a `ServerActor` that holds the
server's resources (`num_cpus`, `num_gpus` per server; Ray sets CUDA_VISIBLE_DEVICES for it), so
Ray's scheduler places servers where the devices are, on one node or across many. `start()` waits
until every server announced its address and answers health checks; `client()` is a plain
`RolloutClient` over those addresses: prompt groups spread by load, a weight push reaches every
server in one call, a server that dies is reported (`client.dead_servers`) and its prompts finish
on the others (rollout/client/load_balance.py). `shutdown()` stops the servers and their actors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

from rollout.client import RolloutClient
from rollout.fleet.server_actor import ServerActor

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Fleet:
    """`serve_args`: extra `rollout serve` flags for every server (e.g. ["--model", path, "--dtype",
    "bfloat16"]; no `--port`, each server binds a free one). `host`: "127.0.0.1" for a one-node fleet;
    "0.0.0.0" across nodes, which requires `token` (servers accept weight updates). Ray is initialized
    locally if it is not already (`ray_init` kwargs), and shut down again by `shutdown()` then.
    """

    def __init__(
        self,
        num_servers: int,
        serve_args: Sequence[str] = (),
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        host: str = "127.0.0.1",
        token: str | None = None,
        env: dict[str, str] | None = None,
        ready_timeout: float = 300.0,
        **ray_init: Any,
    ) -> None:
        if isinstance(num_servers, bool) or not isinstance(num_servers, int) or num_servers < 1:
            raise ValueError(f"num_servers must be a positive integer, got {num_servers!r}")
        flags = set(serve_args)
        for owned in ("--port", "--host", "--token"):
            if owned in flags:
                raise ValueError(f"serve_args: {owned} is set by the fleet (use Fleet's host/token)")
        if host not in _LOOPBACK and not token:
            raise ValueError(f"token: required when the servers bind {host!r} (they accept weight updates)")
        self.num_servers, self.host, self.token = num_servers, host, token
        self.serve_args = [*serve_args, "--host", host, *(["--token", token] if token else [])]
        self.resources = dict(num_cpus=num_cpus, num_gpus=num_gpus)
        self.env = dict(env or {})
        self.ready_timeout = ready_timeout
        self._ray_init = ray_init
        self._started_ray = False
        self.actors: list[Any] = []
        self.addresses: list[str] = []

    def start(self) -> Fleet:
        """Places the servers and waits (up to `ready_timeout` s) until every one is serving."""
        if not ray.is_initialized():
            ray.init(**{"include_dashboard": False, **self._ray_init})
            self._started_ray = True
        actor_class = ray.remote(ServerActor).options(**self.resources)
        self.actors = [actor_class.remote(self.serve_args, self.env) for _ in range(self.num_servers)]
        try:
            self.addresses = ray.get([a.address.remote(self.ready_timeout) for a in self.actors])
            with self.client() as client:
                client.wait_until_ready(self.ready_timeout)
        except BaseException:
            self.shutdown()
            raise
        return self

    def client(self, **kwargs: Any) -> RolloutClient:
        """A new RolloutClient over every server of the fleet (kwargs: RolloutClient's options)."""
        if not self.addresses:
            raise RuntimeError("the fleet is not started: call start() first")
        return RolloutClient(self.addresses, token=self.token, **kwargs)

    def stop_server(self, index: int, kill: bool = False) -> None:
        """Stops server `index` (`kill`: SIGKILL, as if the process died); the others keep serving."""
        ray.get(self.actors[index].stop.remote(kill=kill))

    def shutdown(self) -> None:
        """Stops every server and its actor (and Ray, if the fleet started it)."""
        actors, self.actors, self.addresses = self.actors, [], []
        try:
            ray.get([a.stop.remote() for a in actors], timeout=60)
        finally:
            for actor in actors:
                ray.kill(actor)
            if self._started_ray:
                ray.shutdown()
                self._started_ray = False

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
