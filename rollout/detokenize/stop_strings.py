"""vLLM's stop-string rule (vllm/v1/engine/detokenizer.py `check_stop_strings`), restated.

Only text that ends in the newly decoded characters can hold a new match, so the search starts
`len(stop) - 1` characters before them. Of several stop strings found at once, the one that
completes earliest wins, ties going to the order of the `stop` list (what appending one character
at a time would give).
"""

from __future__ import annotations


def check_stop_strings(
    output_text: str, new_char_count: int, stop: tuple[str, ...] | list[str], include_in_output: bool
) -> tuple[str, int] | None:
    """`(stop string, length to cut output_text to)` or None; the length is -1 when nothing is cut."""
    if not new_char_count or not stop:
        return None
    best: tuple[int, int, str] | None = None  # (end, start, stop string)
    for stop_str in stop:
        start = output_text.find(stop_str, max(0, len(output_text) + 1 - new_char_count - len(stop_str)))
        if start == -1:
            continue
        end = start + len(stop_str)
        if best is None or end < best[0]:
            best = (end, start, stop_str)
    if best is None:
        return None
    end, start, stop_str = best
    if not include_in_output:
        return stop_str, start
    return (stop_str, -1) if end >= len(output_text) else (stop_str, end)
