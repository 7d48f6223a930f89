"""Start-up checks between the trainer and the rollout server, with errors that say what to fix.

A GRPO run that samples from a different model than it trains (another architecture, other
parameter names, another vocabulary) does not crash: it silently learns nothing. These checks
turn each such mismatch into an error before the first round.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollout.client import RolloutClient
from rollout.sampling_params import SamplingParams

from .config import RolloutConfig
from .forward_config import forward_differences

# Tokenized on both sides: digits, spaces, punctuation and non-ASCII catch most tokenizer swaps.
VOCAB_PROBE = "Rollout probe: 12+345=357, naïve café ✓"


class RolloutServerUnavailable(RuntimeError):
    """No rollout server answered at the configured address(es)."""


class RolloutModelMismatch(ValueError):
    """The server hosts a model the trainer cannot push its weights into, or samples another vocabulary."""


def connect(config: RolloutConfig) -> RolloutClient:
    """Opens a client and waits up to `config.wait_timeout` seconds for every server to be ready."""
    client = RolloutClient(config.server, token=config.token, tls=config.tls)
    wait_ready(client, config)
    return client


def wait_ready(client: RolloutClient, config: RolloutConfig) -> None:
    try:
        client.wait_until_ready(config.wait_timeout)
    except Exception as exc:
        raise RolloutServerUnavailable(
            f"no rollout server ready at {', '.join(config.addresses)} after {config.wait_timeout:g} s "
            f"({type(exc).__name__}: {exc}). Start one with `rollout serve --model <the trainer's model> "
            "--port <port>` (or `python -m rollout.cli serve ...`), or fix RolloutConfig.server / "
            "RolloutConfig.wait_timeout."
        ) from exc


def check_server(
    client: RolloutClient, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: RolloutConfig
) -> list[Any]:
    """Every start-up check: same architecture, vocabulary size and forward-pass config on every
    server, same tokenizer. Returns each server's info, in `client.addresses` order."""
    infos = [client.server_info(address) for address in client.addresses]
    for address, info in zip(client.addresses, infos, strict=True):
        try:
            check_model(info, model)
        except RolloutModelMismatch as exc:
            if len(infos) == 1:
                raise
            raise RolloutModelMismatch(f"server {address}: {exc}") from exc
    if config.check_vocabulary:
        for address, info in zip(client.addresses, infos, strict=True):
            if field(info, "has_tokenizer") is not False:
                named = address if len(infos) > 1 else None  # one server: nothing to tell apart
                check_vocabulary(_one_server(client, address, config), tokenizer, named)
    return infos


def _one_server(client: RolloutClient, address: str, config: RolloutConfig) -> RolloutClient:
    """`client` itself when it has one server; else a client of just `address` (probes reach each)."""
    if client.addresses == [address]:
        return client
    return RolloutClient(address, token=config.token, tls=config.tls)


def check_model(info: Any, model: PreTrainedModel) -> None:
    """Refuses a server whose architecture, vocabulary size or forward-pass settings differ from the trainer's."""
    base = _base_model(model)
    problems = []
    trainer_arch = _architecture(base)
    server_arch = field(info, "architecture")
    if server_arch and trainer_arch and server_arch != trainer_arch:
        problems.append(f"architecture: server {server_arch}, trainer {trainer_arch}")
    trainer_vocab = base.get_input_embeddings().weight.shape[0]
    server_vocab = field(info, "vocab_size")
    if server_vocab is not None and int(server_vocab) != trainer_vocab:
        problems.append(f"vocab_size: server {server_vocab}, trainer {trainer_vocab} (embedding rows)")
    server_config = field(info, "model_config")
    if server_config:
        problems += forward_differences(server_config, base.config)
    if problems:
        raise RolloutModelMismatch(
            f"the rollout server hosts {field(info, 'model') or 'another model'}, not the trainer's model: "
            + "; ".join(problems)
            + ". Start the server with the trainer's checkpoint (`rollout serve --model <same path or id>`)."
        )


def check_vocabulary(
    client: RolloutClient, tokenizer: PreTrainedTokenizerBase, address: str | None = None
) -> None:
    """Tokenizes a probe string on the server and refuses a tokenizer that splits it differently."""
    params = SamplingParams(n=1, max_tokens=1, temperature=0.0)
    server_ids = list(client.generate([VOCAB_PROBE], params)[0].prompt_token_ids)
    where = f"server {address}: " if address is not None else ""
    with_special = tokenizer(VOCAB_PROBE)["input_ids"]
    without_special = tokenizer(VOCAB_PROBE, add_special_tokens=False)["input_ids"]
    if server_ids not in (list(with_special), list(without_special)):
        raise RolloutModelMismatch(
            f"{where}vocabulary mismatch: the server tokenizes {VOCAB_PROBE!r} as {server_ids}, the trainer's "
            f"tokenizer as {list(with_special)}. Serve the trainer's tokenizer (`rollout serve --model <path> "
            "--tokenizer <trainer tokenizer>`) or pass the trainer's tokenizer to the trainer."
        )


def same_eos_token_ids(infos: list[Any], addresses: list[str]) -> tuple[int, ...]:
    """The servers' EOS ids (min_tokens bans them, the trainer replays that); refuses servers that differ."""
    found = {
        address: tuple(sorted(field(info, "eos_token_ids") or ()))
        for address, info in zip(addresses, infos, strict=True)
    }
    if len(set(found.values())) > 1:
        raise RolloutModelMismatch(
            f"the rollout servers stop on different EOS ids ({found}); serve one checkpoint on every server"
        )
    return next(iter(found.values()))


def as_model_mismatch(exc: Exception, addresses: list[str]) -> RolloutModelMismatch | None:
    """A refused manifest means other parameter names/shapes/dtypes: the server runs another model."""
    failures = getattr(exc, "failures", None)  # WeightSyncError: {address: "STATUS: details"}
    refused = failures is None or any(
        why.startswith(("INVALID_ARGUMENT", "WeightUpdateError")) for why in failures.values()
    )
    if not refused:
        return None
    return RolloutModelMismatch(
        f"the rollout server at {', '.join(addresses)} refused the trainer's weights: {exc}. The server must "
        "host the same architecture as the trainer (same parameter names, shapes and dtypes)."
    )


def _base_model(model: PreTrainedModel) -> PreTrainedModel:
    get_base = getattr(model, "get_base_model", None)  # PEFT wrappers
    return get_base() if callable(get_base) else model


def _architecture(model: PreTrainedModel) -> str | None:
    architectures = getattr(model.config, "architectures", None)
    return architectures[0] if architectures else type(model).__name__


def field(info: Any, name: str) -> Any:
    return info.get(name) if isinstance(info, dict) else getattr(info, name, None)
