"""`rollout generate`: JSONL prompts in, JSONL samples out, in-process or against `--server`.

Lines are generated in batches (each batch grouped by its sampling params) and written as each
batch completes, in input order. A bad line is reported on stderr with its number and field and
skipped; every other line is still generated. Exit status 1 if any line failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

from tqdm import tqdm

from rollout.commands.engine_args import add_engine_args, engine_config, model_path
from rollout.commands.jsonl import LineError, PromptLine, output_record, parse_line
from rollout.outputs import RequestOutput
from rollout.sampling_params import SamplingParams

Backend = Callable[[list[Any], SamplingParams], list[RequestOutput]]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate samples for a JSONL file of prompts")
    parser.add_argument("--input", "-i", default="-", help="JSONL prompts (default stdin)")
    parser.add_argument("--output", "-o", default="-", help="JSONL results (default stdout)")
    parser.add_argument("--server", help="host:port of a rollout server; default: run the engine in-process")
    parser.add_argument("--token", help="bearer token for --server")
    parser.add_argument("--tls-root", help="PEM root certificate to trust for --server over TLS")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per batch (default 64)")
    sampling = parser.add_argument_group("sampling (per-line 'sampling_params' override these)")
    sampling.add_argument("--n", type=int, default=1)
    sampling.add_argument("--max-tokens", type=int, default=16)
    sampling.add_argument("--temperature", type=float, default=1.0)
    sampling.add_argument("--top-p", type=float, default=1.0)
    sampling.add_argument("--top-k", type=int, default=0)
    sampling.add_argument("--min-p", type=float, default=0.0)
    sampling.add_argument("--repetition-penalty", type=float, default=1.0)
    sampling.add_argument("--seed", type=int)
    sampling.add_argument("--stop-token-ids", type=int, nargs="*", default=[])
    sampling.add_argument("--ignore-eos", action="store_true")
    sampling.add_argument("--logprobs", type=int, help="0: sampled token's logprob; k: plus top-k")
    sampling.add_argument("--logprobs-mode", choices=("processed", "raw"), default="processed")
    add_engine_args(parser)
    parser.set_defaults(run=run)


def base_params(args: argparse.Namespace) -> SamplingParams:
    try:
        return SamplingParams(
            n=args.n, max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
            top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty, seed=args.seed,
            stop_token_ids=tuple(args.stop_token_ids), ignore_eos=args.ignore_eos, logprobs=args.logprobs,
            logprobs_mode=args.logprobs_mode,
        )  # fmt: skip
    except ValueError as exc:
        raise SystemExit(f"rollout generate: {exc}") from None


def run(args: argparse.Namespace) -> int:
    params = base_params(args)
    with _open(args.input, "r", sys.stdin) as src:
        items, errors = parse_lines(src, params)
    backend, close = _backend(args)
    try:
        with _open(args.output, "w", sys.stdout) as dst:
            errors += generate_lines(items, backend, dst, args.batch_size)
    finally:
        close()
    for error in sorted(errors, key=lambda e: e.line):
        print(f"rollout generate: {error}", file=sys.stderr)
    return 1 if errors else 0


def parse_lines(lines: Iterable[str], base: SamplingParams) -> tuple[list[PromptLine], list[LineError]]:
    items, errors = [], []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            items.append(parse_line(number, text, base))
        except LineError as exc:
            errors.append(exc)
    return items, errors


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


def _backend(args: argparse.Namespace) -> tuple[Backend, Callable[[], None]]:
    if args.server:
        from rollout.client import RolloutClient

        client = RolloutClient(args.server, token=args.token, tls=args.tls_root)
        return client.generate, client.close
    from rollout.gc_heap import freeze_startup_heap
    from rollout.llm import LLM

    llm = LLM(model_path(args), tokenizer=args.tokenizer, config=engine_config(args))
    if args.owns_process:
        freeze_startup_heap()
    return local_backend(llm), lambda: None


def local_backend(llm: Any) -> Backend:
    """LLM.generate, with chat messages rendered through the tokenizer's chat template first."""
    from rollout.server.prompts import tokenize_chat, tokenize_text

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


def _open(path: str, mode: str, default: IO[str]) -> Any:
    if path == "-":
        from contextlib import nullcontext

        return nullcontext(default)
    return open(path, mode, encoding="utf-8")
