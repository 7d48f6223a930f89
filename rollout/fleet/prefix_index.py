"""PrefixIndex: which replica computed which prompt prefixes, as chained hashes of fixed text chunks.

The router's picture of where KV blocks live (SGLang's router and Ray Serve LLM's prefix tree keep the
same approximation): a prompt's text is cut into `chunk_chars`-character chunks, each keyed by its
text and its parent's key (as the engine keys blocks), so a key stands for a whole prefix. Turn k+1 of
an episode extends turn k's prompt, so its first keys are turn k's. Bounded, least recently used first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


def chunk_keys(text: str, chunk_chars: int) -> list[int]:
    """The chained keys of `text`'s full chunks, in order (a trailing partial chunk has none)."""
    keys, parent = [], 0
    for start in range(0, len(text) - chunk_chars + 1, chunk_chars):
        parent = hash((parent, text[start : start + chunk_chars]))
        keys.append(parent)
    return keys


class PrefixIndex:
    def __init__(self, chunk_chars: int = 16, capacity: int = 200_000) -> None:
        if chunk_chars < 1 or capacity < 1:
            raise ValueError(f"chunk_chars and capacity must be positive, got {chunk_chars}, {capacity}")
        self.chunk_chars = chunk_chars
        self.capacity = capacity
        self._holders: OrderedDict[int, set[str]] = OrderedDict()

    def keys(self, text: str) -> list[int]:
        return chunk_keys(text, self.chunk_chars)

    def match(self, keys: list[int], replicas: Iterable[str]) -> dict[str, int]:
        """For each replica, how many leading chunks of `keys` it holds (0 when none)."""
        matched = dict.fromkeys(replicas, 0)
        alive = set(matched)
        for count, key in enumerate(keys, start=1):
            alive &= self._holders.get(key, set())
            if not alive:
                break
            for replica in alive:
                matched[replica] = count
        return matched

    def insert(self, keys: list[int], replica: str) -> None:
        """`replica` now holds every prefix in `keys` (refreshed as most recently used)."""
        for key in keys:
            holders = self._holders.get(key)
            if holders is None:
                holders = self._holders[key] = set()
            else:
                self._holders.move_to_end(key)
            holders.add(replica)
        while len(self._holders) > self.capacity:
            self._holders.popitem(last=False)

    def remove(self, replica: str) -> None:
        """Forgets a replica (it died or left: its cache went with it)."""
        for key in list(self._holders):
            holders = self._holders[key]
            holders.discard(replica)
            if not holders:
                del self._holders[key]

    def __len__(self) -> int:
        return len(self._holders)
