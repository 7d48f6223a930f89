"""Where `--model` comes from, checked before torch loads: a model directory, or a Hub id we can fetch.

A missing directory, a folder with no model in it, or a Hub id that is neither cached nor reachable is
a usage error in well under a second; loading found them after the heavy imports, and an offline Hub id
went through huggingface_hub's retries (58 s). A cached id with the Hub unreachable loads from the
cache at once (offline mode for this process and its children), saying so.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from rollout.commands.usage import UsageError

logger = logging.getLogger(__name__)
HUB_PROBE_S = 3.0  # one connection attempt: enough for a slow network, far below the retries' minute
MODEL_FILES = ("config.json", "adapter_config.json")  # a Hugging Face model, or a PEFT adapter on its base
CACHED_FILES = ("config.json", "tokenizer_config.json")  # a model, or a tokenizer alone, in the Hub's cache


def check_model(model: str, flag: str = "--model", files: tuple[str, ...] = MODEL_FILES) -> None:
    """UsageError unless `model` is a directory holding one of `files` (any, when empty) or a Hub id
    that is cached or reachable."""
    path = Path(model).expanduser()
    if path.is_dir():
        if files and not any((path / name).is_file() for name in files):
            raise UsageError(
                f"{flag} {model}: no config.json in this directory; pass a Hugging Face model directory"
            )
        return
    if path.exists():
        raise UsageError(f"{flag} {model}: a file, not a directory; pass the directory holding it")
    _check_hub_id(model, flag)


def _check_hub_id(model: str, flag: str) -> None:
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model)
    except HFValidationError:
        raise UsageError(
            f"{flag} {model}: no such directory, and not a Hugging Face id ('org/name'); "
            "pass a model directory or a Hub id"
        ) from None
    cached = any(isinstance(try_to_load_from_cache(model, name), str) for name in CACHED_FILES)
    if constants.HF_HUB_OFFLINE:
        if not cached:
            raise UsageError(
                f"{flag} {model}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                "HF_HUB_OFFLINE is set; unset it to download, or pass a model directory"
            )
        return
    unreachable = hub_unreachable(constants.ENDPOINT)
    if unreachable is None:
        return
    if not cached:
        raise UsageError(
            f"{flag} {model}: not a local directory, not in the Hugging Face cache, and "
            f"{constants.ENDPOINT} cannot be reached ({unreachable}); connect, or pass a model directory"
        )
    logger.warning(
        "%s cannot be reached (%s): loading %s from the cache", constants.ENDPOINT, unreachable, model
    )
    go_offline()


def hub_unreachable(endpoint: str) -> str | None:
    """Why one TCP connection to the Hub (or the proxy that reaches it) fails now, or None if it opens."""
    url = urlsplit(_proxy_for(endpoint) or endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=HUB_PROBE_S).close()
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return None


def _proxy_for(endpoint: str) -> str | None:
    import urllib.request

    proxies = urllib.request.getproxies()
    host = urlsplit(endpoint).hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    return proxies.get(urlsplit(endpoint).scheme) or proxies.get("all")


def go_offline() -> None:
    """Offline mode for huggingface_hub in this process (read once at its import) and its children."""
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
