"""An image as a caller gives it, decoded to a PIL image and bounded before any model code sees it.

Accepted: a `PIL.Image.Image`, encoded bytes (PNG, JPEG, ... as Pillow reads them), a filesystem path
(offline callers only), or a `data:image/...;base64,` URL. `http(s)` URLs are refused unless the
caller's `ImageLimits.allow_fetch` says so (the OpenAI front end's flag): fetching makes the server a
client of any address a request names. Every refusal is a ValueError naming the part.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """Bounds on one image and on a prompt's images (vLLM's `limit_mm_per_prompt` for the count)."""

    max_images: int = 8
    max_bytes: int = 20 * 1024 * 1024  # encoded size
    max_pixels: int = 4096 * 4096  # decoded width x height
    allow_fetch: bool = False  # http(s) URLs
    fetch_timeout_s: float = 10.0


def load_image(value: object, field: str, limits: ImageLimits, allow_paths: bool = False) -> Image.Image:
    """`value` decoded to an RGB PIL image within `limits`; ValueError naming `field` otherwise."""
    if isinstance(value, Image.Image):
        return _checked(value, field, limits)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _decode(bytes(value), field, limits)
    if isinstance(value, str) and value.startswith("data:"):
        return _decode(_data_url_bytes(value, field), field, limits)
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return _decode(_fetch(value, field, limits), field, limits)
    if allow_paths and isinstance(value, (str, os.PathLike)):
        try:
            with open(value, "rb") as f:
                data = f.read(limits.max_bytes + 1)
        except OSError as exc:
            raise ValueError(f"{field}: cannot read the image file {str(value)!r}: {exc}") from None
        return _decode(data, field, limits)
    kinds = "a PIL image, encoded bytes, a data: URL" + (" or a file path" if allow_paths else "")
    raise ValueError(f"{field}: an image must be {kinds}, got {type(value).__name__}")


def _data_url_bytes(url: str, field: str) -> bytes:
    header, _, payload = url.partition(",")
    if not header.startswith("data:image/") or not header.endswith(";base64"):
        raise ValueError(f"{field}: a data URL must be data:image/<type>;base64,<data>, got {header[:40]!r}")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{field}: the data URL's base64 payload does not decode") from None


def _fetch(url: str, field: str, limits: ImageLimits) -> bytes:
    if not limits.allow_fetch:
        raise ValueError(
            f"{field}: http(s) image URLs are not fetched by this server (start it with --allow-image-urls "
            "to allow it); send the image as a data:image/...;base64 URL"
        )
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=limits.fetch_timeout_s) as response:  # noqa: S310
            return response.read(limits.max_bytes + 1)
    except OSError as exc:
        raise ValueError(f"{field}: cannot fetch the image at {url[:80]!r}: {exc}") from None


def _decode(data: bytes, field: str, limits: ImageLimits) -> Image.Image:
    if len(data) > limits.max_bytes:
        raise ValueError(f"{field}: the image has more than {limits.max_bytes} bytes (the limit)")
    try:
        image = Image.open(io.BytesIO(data))
        _check_pixels(image, field, limits)  # from the header, before the pixels are decoded
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{field}: not a readable image ({type(exc).__name__}: {exc})") from None
    return _checked(image, field, limits)


def _check_pixels(image: Image.Image, field: str, limits: ImageLimits) -> None:
    if image.width * image.height > limits.max_pixels:
        raise ValueError(
            f"{field}: the image is {image.width}x{image.height}, more than the {limits.max_pixels} pixels allowed"
        )
    if image.width == 0 or image.height == 0:
        raise ValueError(f"{field}: the image is empty ({image.width}x{image.height})")


def _checked(image: Image.Image, field: str, limits: ImageLimits) -> Image.Image:
    _check_pixels(image, field, limits)
    return image if image.mode == "RGB" else image.convert("RGB")
