"""Version spans: which weights sampled each output token, and how old the KV it attended to was.

A span list `[(first_token_index, version), ...]` is compact (one entry per change of version) and
exact: token i belongs to the last span whose first index is <= i. Sequences keep these lists as
data, like `num_computed_tokens`; the engine appends to them when it samples.
"""

from __future__ import annotations

Spans = list[tuple[int, int]]


def extend_spans(spans: Spans, index: int, version: int) -> None:
    """Records that output token `index` (the next one) carries `version`."""
    if not spans or spans[-1][1] != version:
        spans.append((index, version))


def check_spans(name: str, spans: Spans, num_tokens: int) -> Spans:
    """Validates user-supplied spans for `num_tokens` tokens; raises ValueError naming `name`."""
    out = [(int(first), int(version)) for first, version in spans]
    if num_tokens == 0:
        if out:
            raise ValueError(f"{name} must be empty when there are no tokens, got {out}")
        return out
    if not out or out[0][0] != 0:
        raise ValueError(f"{name} must start at token index 0, got {out}")
    for (first, version), (nxt, nxt_version) in zip(out, out[1:], strict=False):
        if not first < nxt < num_tokens:
            raise ValueError(f"{name}: first indices must increase and stay below {num_tokens}, got {out}")
        if nxt_version == version:
            raise ValueError(f"{name}: adjacent spans must differ in version, got {out}")
    if any(version < 0 for _, version in out):
        raise ValueError(f"{name}: versions must be >= 0, got {out}")
    return out


def oldest_version(spans: Spans, default: int) -> int:
    return min((version for _, version in spans), default=default)
