"""Sampler cost per step at 256 rows, with and without structured outputs (not a test).

    python benchmarks/bench_structured_outputs.py [--rows 256] [--vocab 32000] [--steps 32]

No large tokenizer ships with the package, so a byte-level BPE tokenizer of `--vocab` tokens is
trained first on the Python standard library's sources (about 10 s; a real model's vocabulary has
the same kind of tokens). Every row follows the same JSON schema with its own matcher, driven by the
tokens the sampler draws (the real path: fill the masks, apply them, sample, advance). Reports the
sampler's time per step without grammars, with them, and the share spent filling and unpacking the
masks (best of 3 runs each).
"""

from __future__ import annotations

import argparse
import glob
import json
import sysconfig
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rollout.engine.sample import grammar_mask
from rollout.engine.sample.sampler import Sampler, SampleRow
from rollout.sampling_params import SamplingParams
from rollout.structured_outputs import StructuredOutputsParams
from rollout.structured_outputs.grammar_compiler import GrammarCompiler
from rollout.structured_outputs.grammar_state import GrammarState

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "tags"],
}
EOS = 2


def bpe_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    files = sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/**/*.py", recursive=True))[:3000]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=alphabet
    )
    backend.train_from_iterator(_texts(files), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )


def _texts(files: list[str]):
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield f.read()


def ms_per_step(sampler: Sampler, rows: list[SampleRow], logits: torch.Tensor, steps: int) -> float:
    total = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        out = sampler(logits, rows)
        for row, token in zip(rows, out.token_ids, strict=True):
            if row.grammar is not None and not row.grammar.finished:
                assert row.grammar.accept(token)
        total += time.perf_counter() - start
        for row in rows:  # a finished grammar allows only EOS: start that row again
            if row.grammar is not None and row.grammar.finished:
                row.grammar = GrammarState(row.grammar_compiled)  # type: ignore[attr-defined]
    return total / steps * 1e3


class _Row(SampleRow):
    __slots__ = ("grammar_compiled",)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = bpe_tokenizer(args.vocab)
    vocab = len(tokenizer)
    start = time.perf_counter()
    compiler = GrammarCompiler(tokenizer, vocab, [EOS])
    setup = time.perf_counter() - start
    start = time.perf_counter()
    compiled = compiler.compile(StructuredOutputsParams(json=SCHEMA))
    compile_s = time.perf_counter() - start
    params = SamplingParams(temperature=1.0, seed=0, logprobs=0)
    logits = torch.randn(args.rows, vocab, generator=torch.Generator().manual_seed(0))
    plain = [SampleRow(params, i, [5, 6, 7], 3) for i in range(args.rows)]
    rows = []
    for i in range(args.rows):
        row = _Row(params, i, [5, 6, 7], 3, GrammarState(compiled))
        row.grammar_compiled = compiled
        rows.append(row)
    sampler = Sampler(0, frozenset({EOS}))
    ms_per_step(sampler, plain, logits, 3)  # warm up
    # best of 3 runs each: the figures are for a quiet machine
    base = min(ms_per_step(sampler, plain, logits, args.steps) for _ in range(3))
    fill = min(_fill_ms(rows, vocab, args.steps) for _ in range(3))
    with_grammar = min(ms_per_step(sampler, rows, logits, args.steps) for _ in range(3))
    print(
        json.dumps(
            {
                "rows": args.rows,
                "vocab": vocab,
                "tokenizer_table_s": round(setup, 3),
                "compile_json_schema_ms": round(compile_s * 1e3, 2),
                "sampler_ms_per_step_plain": round(base, 2),
                "sampler_ms_per_step_structured": round(with_grammar, 2),
                "overhead_ms_per_step": round(with_grammar - base, 2),
                "of_which_fill_masks_ms": round(fill, 2),
            }
        )
    )


def _fill_ms(rows: list[SampleRow], vocab: int, steps: int) -> float:
    """Filling the masks alone (the grammar library's share of the overhead), at the rows' current states."""
    bitmask = torch.zeros((len(rows), (vocab + 31) // 32), dtype=torch.int32)
    start = time.perf_counter()
    for _ in range(steps):
        for j, row in enumerate(rows):
            row.grammar.fill_bitmask(bitmask, j)
        grammar_mask.unpack_bitmask(bitmask, vocab)
    return (time.perf_counter() - start) / steps * 1e3


if __name__ == "__main__":
    main()
