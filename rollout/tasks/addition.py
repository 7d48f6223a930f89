"""Multi-digit addition: the verifiable task the embedded default model was trained on.

A prompt is "a+b=" with 1..`max_digits`-digit operands; the correct completion is the decimal sum.
The reward is computed from the text alone (no model, no tokenizer), so GRPO loops, the demo and the
tests all score completions the same way. Pure Python, deterministic for a given seed.
"""

from __future__ import annotations

import random
import re

MAX_DIGITS = 3
_PROMPT_RE = re.compile(r"(\d+)\+(\d+)=")


def make_prompts(n: int, seed: int, max_digits: int = MAX_DIGITS) -> list[str]:
    """`n` prompts "a+b="; each operand's length is uniform in 1..max_digits, then its value uniform.

    Sampling the length first (not the value) keeps short, easy problems common, so the mix has
    problems the default model solves and problems it does not.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if max_digits < 1:
        raise ValueError(f"max_digits must be >= 1, got {max_digits}")
    rng = random.Random(seed)
    return [f"{_operand(rng, max_digits)}+{_operand(rng, max_digits)}=" for _ in range(n)]


def answer(prompt: str) -> str:
    """The correct completion for `prompt` ("12+345=" -> "357")."""
    a, b = _parse(prompt)
    return str(a + b)


def reward(prompt: str, completion: str) -> float:
    """1.0 if `completion` (text up to EOS, surrounding whitespace ignored) is the exact sum, else 0.0.

    Binary on purpose: it is the verifiable reward GRPO is usually run with; see `digit_reward` for a
    shaped alternative.
    """
    return 1.0 if completion.strip() == answer(prompt) else 0.0


def digit_reward(prompt: str, completion: str) -> float:
    """Shaped reward in [0, 1]: the fraction of answer digits right, aligned from the units digit.

    A completion of the wrong length is capped at 0.5 so that only the exact answer scores 1.0;
    anything that is not all digits scores 0.0.
    """
    target, text = answer(prompt), completion.strip()
    if not text.isdigit():
        return 0.0
    hits = sum(t == c for t, c in zip(reversed(target), reversed(text), strict=False))
    score = hits / len(target)
    return score if len(text) == len(target) else min(score, 0.5)


def _operand(rng: random.Random, max_digits: int) -> int:
    digits = rng.randint(1, max_digits)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)


def _parse(prompt: str) -> tuple[int, int]:
    match = _PROMPT_RE.fullmatch(prompt.strip())
    if match is None:
        raise ValueError(f"prompt must look like '12+345=', got {prompt!r}")
    return int(match.group(1)), int(match.group(2))
