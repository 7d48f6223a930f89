"""`rollout generate`: JSONL prompts in, JSONL samples out, in-process or against `--server`.

Lines are generated in batches (each batch grouped by its sampling params) and written as each
batch completes, in input order. A bad line is reported on stderr with its number and field and
skipped; every other line is still generated. Exit status 1 if any line failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from rollout.commands.arg_types import positive_int
from rollout.commands.engine_args import add_engine_args, engine_flags_given, engine_source, loading_model
from rollout.commands.jsonl import LineError, PromptLine, output_record
from rollout.commands.prompt_files import check_output, open_path, read_prompts
from rollout.commands.usage import UsageError, flag_error
from rollout.config import EngineConfig
from rollout.outputs import RequestOutput
from rollout.sampling_params import SamplingParams
from rollout.sampling_params.logprobs_modes import LOGPROBS_MODE_ALIASES, LOGPROBS_MODES

logger = logging.getLogger(__name__)
Backend = Callable[[list[Any], SamplingParams], list[RequestOutput]]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate samples for a JSONL file of prompts")
    parser.add_argument("--input", "-i", default="-", help="JSONL prompts (default stdin)")
    parser.add_argument("--output", "-o", default="-", help="JSONL results (default stdout)")
    parser.add_argument("--server", help="host:port of a rollout server; default: run the engine in-process")
    parser.add_argument("--token", help="bearer token for --server")
    parser.add_argument("--tls-root", help="PEM root certificate to trust for --server over TLS")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="prompts per batch (default 64)")
    sampling = parser.add_argument_group("sampling (per-line 'sampling_params' override these)")
    flag = _sampling_flag(sampling)
    flag("--n", type=int, help="samples per prompt")
    flag("--max-tokens", type=int, help="new tokens per sample, at most")
    flag("--temperature", type=float, help="0 is greedy")
    flag("--top-p", type=float, help="nucleus: keep the smallest set of tokens with this mass")
    flag("--top-k", type=int, help="keep the k most likely tokens; 0 is off")
    flag("--min-p", type=float, help="drop tokens below min-p times the top probability")
    flag("--repetition-penalty", type=float, help="divide the logits of tokens already seen; 1 is off")
    flag("--seed", type=int, help="sampling seed: the same seed, the same samples")
    flag("--stop", nargs="*", metavar="TEXT", help="strings that end a sample (text cut before them)")
    flag("--include-stop-str-in-output", action="store_true", help="keep the stop string in the text")
    flag("--stop-token-ids", type=int, nargs="*", help="token ids that end a sample, besides EOS")
    flag("--min-tokens", type=int, help="EOS and stop tokens are masked until this many tokens")
    flag("--presence-penalty", type=float, help="subtracted from the logits of tokens already sampled")
    flag("--frequency-penalty", type=float, help="subtracted once per earlier occurrence of a token")
    flag("--ignore-eos", action="store_true", help="keep generating past EOS")
    flag("--logprobs", type=int, help="0: the sampled token's logprob; k: plus the top k")
    flag(
        "--logprobs-mode",
        choices=(*LOGPROBS_MODES, *LOGPROBS_MODE_ALIASES),
        help="processed_logprobs: after penalties, temperature and filters; raw_logprobs: the model's; *_logits: "
        "the values before the log-softmax ('processed' / 'raw': the *_logprobs ones); none: the engine's",
    )
    add_engine_args(parser, skip=("logprobs_mode",))
    parser.set_defaults(run=run)


def _sampling_flag(group: argparse._ArgumentGroup) -> Callable[..., None]:
    """Adds a flag whose default is SamplingParams' own, shown in its help."""
    defaults = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
    defaults["stop_token_ids"] = []
    defaults["stop"] = []

    def add(flag: str, help: str, **kwargs: Any) -> None:
        default = defaults[flag[2:].replace("-", "_")]
        shown = "none" if default is None else default
        group.add_argument(flag, default=default, help=f"{help} (default {shown})", **kwargs)

    return add


def base_params(args: argparse.Namespace) -> SamplingParams:
    try:
        return SamplingParams(
            n=args.n, max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
            top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty, seed=args.seed,
            stop=tuple(args.stop), include_stop_str_in_output=args.include_stop_str_in_output,
            stop_token_ids=tuple(args.stop_token_ids), min_tokens=args.min_tokens,
            presence_penalty=args.presence_penalty, frequency_penalty=args.frequency_penalty,
            ignore_eos=args.ignore_eos, logprobs=args.logprobs, logprobs_mode=args.logprobs_mode,
        )  # fmt: skip
    except ValueError as exc:
        fields = [f.name for f in dataclasses.fields(SamplingParams) if hasattr(args, f.name)]
        flags = {name: "--" + name.replace("_", "-") for name in fields}
        raise flag_error(exc, {name: getattr(args, name) for name in fields}, flags) from None


def run(args: argparse.Namespace) -> int:
    params = base_params(args)
    check_target_flags(args)
    source = None if args.server else engine_source(args)  # before the input: stdin may be a terminal
    check_output(args.output)
    items, errors = read_prompts(args.input, params)
    backend, close = _backend(args, source)
    try:
        with open_path(args.output, "w", sys.stdout) as dst:
            errors += generate_lines(items, backend, dst, args.batch_size)
    except Exception as exc:
        if args.server and _is_rpc_error(exc):
            raise SystemExit(f"rollout generate: {server_failure(args.server, exc)}") from None
        raise
    finally:
        close()
    for error in sorted(errors, key=lambda e: e.line):
        print(f"rollout generate: {error}", file=sys.stderr)
    return 1 if errors else 0


def check_target_flags(args: argparse.Namespace) -> None:
    """Flags for the other target (in-process engine or --server) would be ignored: refuse them."""
    if args.server and (flags := engine_flags_given(args)):
        named = " ".join(flags)
        raise UsageError(
            f"with --server, {named} would be ignored (the server's own model and engine serve); "
            f"drop {named}, or drop --server"
        )
    connection = [f"--{name.replace('_', '-')}" for name in ("token", "tls_root") if getattr(args, name)]
    if not args.server and connection:
        named = " ".join(connection)
        raise UsageError(
            f"without --server, {named} would be ignored; add --server host:port, or drop {named}"
        )
    if args.tls_root and not Path(args.tls_root).is_file():
        raise UsageError(f"--tls-root {args.tls_root}: no such file; pass the server's PEM root certificate")


def _is_rpc_error(exc: Exception) -> bool:
    import grpc

    return isinstance(exc, grpc.RpcError)


def server_failure(address: str, exc: Any) -> str:
    """One line for an RPC error that is not about one input line."""
    import grpc

    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"no rollout server answers at {address}; start one (rollout serve) or fix --server"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"the server at {address} refused the token; pass its --token"
    return f"the server at {address} answered {code.name}: {_message(exc)}"


def generate_lines(
    items: Sequence[PromptLine], backend: Backend, dst: IO[str], batch_size: int
) -> list[LineError]:
    """Generates every item, writing results batch by batch; returns the lines that failed."""
    errors: list[LineError] = []
    with tqdm(total=len(items), desc="generate", unit="prompt", file=sys.stderr) as bar:
        for start in range(0, len(items), batch_size):
            batch = items[start : start + batch_size]
            results = _run_batch(batch, backend, errors)
            for item in batch:
                if item.line in results:
                    dst.write(json.dumps(output_record(item, results[item.line])) + "\n")
            dst.flush()
            bar.update(len(batch))
    return errors


def _run_batch(
    batch: Sequence[PromptLine], backend: Backend, errors: list[LineError]
) -> dict[int, RequestOutput]:
    groups: dict[SamplingParams, list[PromptLine]] = {}
    for item in batch:
        groups.setdefault(item.params, []).append(item)
    results: dict[int, RequestOutput] = {}
    for params, group in groups.items():
        try:
            outputs = backend([i.prompt for i in group], params)
        except Exception as exc:
            if not _is_input_error(exc):
                raise
            if len(group) == 1:
                errors.append(LineError(group[0].line, _message(exc)))
            else:
                results.update(_run_batch_one_by_one(group, backend, errors))
            continue
        results.update({i.line: o for i, o in zip(group, outputs, strict=True)})
    return results


def _run_batch_one_by_one(
    group: list[PromptLine], backend: Backend, errors: list[LineError]
) -> dict[int, RequestOutput]:
    """A batch failed on input: run each line alone so only the bad ones are lost."""
    results: dict[int, RequestOutput] = {}
    for item in group:
        results.update(_run_batch([item], backend, errors))
    return results


def _is_input_error(exc: Exception) -> bool:
    if isinstance(exc, ValueError):
        return True
    code = getattr(exc, "code", None)
    if not callable(code):
        return False
    import grpc

    return code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)


def _message(exc: Exception) -> str:
    details = getattr(exc, "details", None)
    return str(details() if callable(details) else exc)


def _backend(
    args: argparse.Namespace, source: tuple[Any, EngineConfig] | None
) -> tuple[Backend, Callable[[], None]]:
    if source is None:
        from rollout.client import RolloutClient

        client = RolloutClient(args.server, token=args.token, tls=args.tls_root)
        return client.generate, client.close
    model, config = source
    logger.info(
        "loading %s: torch and transformers, the weights, the engine (CPU kernels, KV cache, self-check)",
        model,
    )
    from rollout.gc_heap import freeze_startup_heap
    from rollout.llm import LLM

    with loading_model(model):
        llm = LLM(model, tokenizer=args.tokenizer, config=config)
    if args.owns_process:
        freeze_startup_heap()
    return local_backend(llm), lambda: None


def local_backend(llm: Any) -> Backend:
    """LLM.generate, with chat messages rendered through the tokenizer's chat template first."""
    from rollout.protocol.prompts import tokenize_chat, tokenize_text

    def generate(prompts: list[Any], params: SamplingParams) -> list[RequestOutput]:
        max_chars = llm.max_prompt_chars if llm.tokenizer is not None else None
        texts: dict[int, str] = {}
        ids = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
                tokens, texts[i] = tokenize_chat(llm.tokenizer, prompt, max_chars)
                ids.append(tokens)
            elif isinstance(prompt, str):
                ids.append(tokenize_text(llm.tokenizer, prompt, max_chars))
                texts[i] = prompt
            else:
                ids.append(prompt)
        outputs = llm.generate(ids, params)
        for i, text in texts.items():
            outputs[i].prompt = text
        return outputs

    return generate
