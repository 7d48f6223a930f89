"""`rollout serve`'s image flags: vLLM's `--limit-mm-per-prompt '{"image": N}'`, the largest image taken,
and whether http(s) image URLs are fetched (not by default: the server would fetch any address a request
names). Both front ends (gRPC, OpenAI) apply the same limits."""

from __future__ import annotations

import argparse
import json

from rollout.commands.usage import UsageError
from rollout.multimodal.image_parts import ImageLimits


def add_image_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit-mm-per-prompt",
        default=None,
        help="images a prompt may carry, as vLLM takes it: '{\"image\": 4}' (default 8; video and audio: 0, "
        "they are not served)",
    )
    parser.add_argument("--max-image-mb", type=float, default=20.0, help="largest encoded image (default 20)")
    parser.add_argument(
        "--allow-image-urls",
        action="store_true",
        help="fetch http(s) image URLs in OpenAI image_url parts (default: refused; send data: URLs)",
    )


def image_limits(args: argparse.Namespace) -> ImageLimits:
    """The limits the flags name; UsageError naming the flag when they do not parse."""
    max_images = ImageLimits().max_images
    if args.limit_mm_per_prompt is not None:
        try:
            limits = json.loads(args.limit_mm_per_prompt)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--limit-mm-per-prompt: not JSON ({exc}); e.g. '{{\"image\": 4}}'") from None
        if not isinstance(limits, dict) or not all(isinstance(v, int) and v >= 0 for v in limits.values()):
            raise UsageError("--limit-mm-per-prompt: must be a JSON object of counts, e.g. '{\"image\": 4}'")
        served = {k: v for k, v in limits.items() if v > 0 and k != "image"}
        if served:
            raise UsageError(f"--limit-mm-per-prompt: {', '.join(served)} inputs are not served; only image")
        max_images = limits.get("image", max_images)
    if args.max_image_mb <= 0:
        raise UsageError("--max-image-mb: must be positive")
    return ImageLimits(
        max_images=max_images, max_bytes=int(args.max_image_mb * 2**20), allow_fetch=args.allow_image_urls
    )
