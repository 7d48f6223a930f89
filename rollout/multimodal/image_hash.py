"""The content hash of an image, the key the prefix cache adds to every block an image's tokens touch.

Two prompts with the same text and different images tokenize to the same ids (the placeholders are all
one token id), so a cache keyed by token ids alone would hand one prompt the other's KV: the hash of the
decoded pixels (mode, size and bytes, as vLLM's `MultiModalHasher` hashes a PIL image) tells them apart.
"""

from __future__ import annotations

import hashlib

from PIL import Image


def hash_image(image: Image.Image) -> str:
    """sha256 over the mode, the size and the raw pixel bytes: the same picture in PNG or JPEG-decoded
    form hashes the same only when its pixels are the same."""
    digest = hashlib.sha256()
    digest.update(f"{image.mode}:{image.width}x{image.height}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()
