"""Load-based spreading of prompts over several servers, and the servers a client has given up on.

A client over several servers used to deal a call's prompts round robin, so a server still busy
with a long earlier call got as many new prompts as an idle one. `LoadBalancer` counts, per server,
the tokens this client has outstanding there (each prompt's tokens plus n * max_tokens, an upper
bound of what it will compute) and gives each prompt group to the server with the fewest. A server
that stops answering (UNAVAILABLE after the retries) is marked dead: it gets no more work from this
client, and its unfinished prompts go to the live ones, until a health check finds it serving again
(the client probes its dead servers, at most once per `probe_interval_s` each, before a call).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

logger = logging.getLogger(__name__)


class NoLiveServerError(ConnectionError):
    """Every server of the client is dead (stopped answering); nothing more can be generated."""


class LoadBalancer:
    """Outstanding tokens per server address, shared by every call of one client (thread-safe)."""

    def __init__(self, addresses: Sequence[str], probe_interval_s: float = 2.0) -> None:
        self._load = dict.fromkeys(addresses, 0)
        self._dead: dict[str, str] = {}  # address -> why
        self._probed: dict[str, float] = {}  # dead address -> monotonic time of its last probe
        self.probe_interval_s = probe_interval_s
        self._lock = threading.Lock()

    @property
    def dead(self) -> dict[str, str]:
        """Servers given up on, with the error that ended them."""
        with self._lock:
            return dict(self._dead)

    def live(self) -> list[str]:
        with self._lock:
            return [a for a in self._load if a not in self._dead]

    def assign(self, costs: Sequence[int]) -> dict[str, list[int]]:
        """Index lists per live server: each prompt, in order, to the least loaded; loads are added."""
        with self._lock:
            live = [a for a in self._load if a not in self._dead]
            if not live:
                raise NoLiveServerError(f"no live rollout server: {self._describe_dead()}")
            shards: dict[str, list[int]] = {a: [] for a in live}
            for index, cost in enumerate(costs):
                address = min(live, key=lambda a: (self._load[a], live.index(a)))
                shards[address].append(index)
                self._load[address] += cost
            return {a: idx for a, idx in shards.items() if idx}

    def release(self, address: str, cost: int) -> None:
        with self._lock:
            self._load[address] = max(0, self._load[address] - cost)

    def mark_dead(self, address: str, why: str) -> None:
        with self._lock:
            self._mark_dead_locked(address, why)

    def _mark_dead_locked(self, address: str, why: str) -> None:
        self._dead[address] = why
        self._probed[address] = time.monotonic()
        self._load[address] = 0

    def due_for_probe(self, now: float | None = None) -> list[str]:
        """Dead servers not probed for `probe_interval_s`; each is counted as probed now (one prober)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            due = [a for a in self._dead if now - self._probed.get(a, 0.0) >= self.probe_interval_s]
            for address in due:
                self._probed[address] = now
            return due

    def revive(self, address: str) -> None:
        """A dead server answers again (a restart): it takes work from the next assignment on."""
        with self._lock:
            if self._dead.pop(address, None) is None:
                return
            self._probed.pop(address, None)
        logger.warning("rollout server %s answers again; it gets prompts again", address)

    def give_up(self, address: str, why: str) -> bool:
        """Marks `address` dead unless it is the last live server; True when its work may go elsewhere.

        One check under the lock, so concurrent calls that see the same server die agree: the first
        marks it, the others find it marked and re-route too, and two servers failing at once never
        both give up on each other.
        """
        with self._lock:
            if address in self._dead:
                return any(a not in self._dead for a in self._load)
            if not any(a != address and a not in self._dead for a in self._load):
                return False  # the last server: its error is the call's (a restart may bring it back)
            self._mark_dead_locked(address, why)
        logger.warning("rollout server %s stopped answering (%s); its prompts go to the others", address, why)
        return True

    def is_dead(self, address: str) -> bool:
        with self._lock:
            return address in self._dead

    def load(self, address: str) -> int:
        with self._lock:
            return self._load[address]

    def _describe_dead(self) -> str:
        return "; ".join(f"{a} ({why})" for a, why in self._dead.items()) or "none configured"


def prompt_cost(prompt_tokens: int, n: int, max_tokens: int) -> int:
    """Tokens a prompt group may cost a server: its prompt once (the n samples share it) plus n
    completions of at most max_tokens."""
    return prompt_tokens + n * max_tokens
