"""`rollout serve`'s image flags: vLLM's --limit-mm-per-prompt, --max-image-mb, --allow-image-urls; a bad
value is a usage error naming the flag, before any model loads."""

from __future__ import annotations

import pytest

from rollout.cli import build_parser
from rollout.commands.image_args import image_limits
from rollout.commands.usage import UsageError


def limits_of(*flags: str):
    return image_limits(build_parser().parse_args(["serve", *flags]))


def test_the_flags_set_the_limits() -> None:
    limits = limits_of(
        "--limit-mm-per-prompt", '{"image": 2, "video": 0}', "--max-image-mb", "1", "--allow-image-urls"
    )
    assert (limits.max_images, limits.max_bytes, limits.allow_fetch) == (2, 2**20, True)
    assert limits_of().allow_fetch is False  # http(s) URLs are refused unless allowed


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{image: 2}", "not JSON"),
        ('{"image": -1}', "a JSON object of counts"),
        ('{"video": 1}', "video inputs"),
    ],
)
def test_bad_limits_are_usage_errors(value: str, message: str) -> None:
    with pytest.raises(UsageError, match=rf"--limit-mm-per-prompt: .*{message}"):
        limits_of("--limit-mm-per-prompt", value)
