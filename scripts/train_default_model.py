"""Train the embedded default model: a tiny Llama that does multi-digit addition, imperfectly.

The model ships in `rollout/assets/default_model/` so the CLI, demo, examples and tests run offline.
Training stops early on purpose (once greedy accuracy reaches `--target-accuracy`) and uses label
smoothing, so temperature-1 samples are right only about a third of the time: a partly-right policy
is what gives GRPO a reward signal to improve on. Reproducible: fixed seed, one thread, deterministic
algorithms. Run: `python scripts/train_default_model.py` (a few minutes on one core).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # runnable from a plain checkout, without installing the package
from rollout.tasks import addition  # noqa: E402

OUTPUT_DIR = REPO_ROOT / "rollout" / "assets" / "default_model"
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
VOCAB = SPECIAL_TOKENS + list("0123456789+=")
MAX_POSITIONS = 64  # a prompt plus answer is at most 15 tokens; room for longer experiments
SEEDS_PER_RUN = 1_000_000  # training batch `step` of run `seed` draws its prompts with seed * this + step
EVAL_SEED = SEEDS_PER_RUN - 1  # never a training batch's seed, since max_steps < SEEDS_PER_RUN - 1


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    batch_size: int = 128
    max_steps: int = 3000
    lr: float = 2e-3
    warmup_steps: int = 100
    eval_every: int = 100
    num_eval_prompts: int = 512
    # Label smoothing leaves mass on wrong tokens, so temperature-1 samples are much worse than greedy:
    # the gap GRPO closes first. Training stops once greedy accuracy reaches `target_accuracy`.
    label_smoothing: float = 0.2
    target_accuracy: float = 0.7


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one token per character, "<bos>" prepended, no spaces on decode."""
    vocab = {token: i for i, token in enumerate(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )


def build_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config)


def make_batch(tokenizer: PreTrainedTokenizerFast, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded `<bos> prompt answer <eos>` ids and labels that score only the answer and `<eos>`.

    Right padding needs no attention mask: causal attention never lets a real token see a later pad.
    """
    rows, labels = [], []
    for prompt in prompts:
        prompt_ids = tokenizer(prompt)["input_ids"]
        answer_ids = tokenizer(addition.answer(prompt), add_special_tokens=False)["input_ids"]
        ids = prompt_ids + answer_ids + [tokenizer.eos_token_id]
        rows.append(ids)
        labels.append([-100] * len(prompt_ids) + ids[len(prompt_ids) :])
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    label_ids = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    return input_ids, label_ids


@torch.no_grad()
def accuracy(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompts: list[str], sample: bool
) -> float:
    """Fraction of prompts answered exactly (one completion each), greedy or at temperature 1.0."""
    completions = generate(model, tokenizer, prompts, sample)
    return sum(addition.reward(p, c) for p, c in zip(prompts, completions, strict=True)) / len(prompts)


def generate(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompts: list[str], sample: bool
) -> list[str]:
    """One completion per prompt, decoded up to `<eos>` (the tokenizer pads on the left)."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    out = model.generate(**batch, do_sample=sample, temperature=1.0, top_p=1.0, max_new_tokens=8)
    return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then constant: training is stopped early, long before any decay would matter."""
    return cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps)


def train(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, cfg: TrainConfig) -> dict[str, float]:
    """AdamW on fresh random problems each step; returns the accuracies measured when it stopped."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    eval_prompts = addition.make_prompts(cfg.num_eval_prompts, EVAL_SEED)
    start, metrics = time.monotonic(), {}
    for step in range(cfg.max_steps):
        input_ids, labels = make_batch(
            tokenizer, addition.make_prompts(cfg.batch_size, cfg.seed * SEEDS_PER_RUN + step)
        )
        logits = model(input_ids=input_ids).logits[:, :-1]
        loss = F.cross_entropy(logits.transpose(1, 2), labels[:, 1:], label_smoothing=cfg.label_smoothing)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % cfg.eval_every == 0:
            metrics = evaluate(model, tokenizer, eval_prompts, step + 1)
            print(
                f"step {step + 1:5d} loss {loss.item():.3f} {_fmt(metrics)} {time.monotonic() - start:.0f}s",
                flush=True,
            )
            if metrics["greedy_accuracy"] >= cfg.target_accuracy:
                break
    return metrics


def evaluate(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompts: list[str], step: int
) -> dict[str, float]:
    """Greedy and temperature-1 accuracy on `prompts`, tagged with the training step."""
    model.eval()
    torch.manual_seed(EVAL_SEED)  # sampled accuracy is reproducible, independent of training RNG use
    metrics = {
        "steps": step,
        "greedy_accuracy": accuracy(model, tokenizer, prompts, sample=False),
        "sampled_accuracy": accuracy(model, tokenizer, prompts, sample=True),
    }
    model.train()
    return metrics


def save(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, out: Path, info: dict) -> None:
    """Write the HF files, then CHECKSUMS.json (sha256 of every other file plus how it was made)."""
    _clear_previous(out)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=8,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}
    (out / "CHECKSUMS.json").write_text(json.dumps({"files": files, **info}, indent=2) + "\n")


def _clear_previous(out: Path) -> None:
    """Remove a previous run's files (those its CHECKSUMS.json lists); refuse to touch anything else."""
    out.mkdir(parents=True, exist_ok=True)
    checksums = out / "CHECKSUMS.json"
    if not checksums.exists():
        if any(out.iterdir()):
            raise ValueError(f"--output {out} is not empty and holds no CHECKSUMS.json; pick an empty folder")
        return
    for name in json.loads(checksums.read_text())["files"]:
        (out / name).unlink(missing_ok=True)
    checksums.unlink()
    if any(out.iterdir()):
        raise ValueError(f"--output {out} holds files not listed in its CHECKSUMS.json; remove them first")


def _fmt(metrics: dict[str, float]) -> str:
    return f"greedy {metrics['greedy_accuracy']:.3f} sampled {metrics['sampled_accuracy']:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--max-steps", type=int, default=TrainConfig.max_steps)
    parser.add_argument("--target-accuracy", type=float, default=TrainConfig.target_accuracy)
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR)
    args = parser.parse_args()
    cfg = TrainConfig(seed=args.seed, max_steps=args.max_steps, target_accuracy=args.target_accuracy)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    print(f"params: {sum(p.numel() for p in model.parameters()):,}")
    start = time.monotonic()
    metrics = train(model, tokenizer, cfg)
    elapsed = time.monotonic() - start
    print(f"final after {elapsed:.0f}s: {_fmt(metrics)}")
    info = {
        "seed": cfg.seed,
        "train_config": dataclasses.asdict(cfg),
        **metrics,
        "train_seconds": round(elapsed),
    }
    save(model, tokenizer, args.output, info)
    _check_reload(args.output)


def _check_reload(out: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(out)
    size_mb = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"saved to {out} ({size_mb:.2f} MB); reloads as {type(model).__name__}")


if __name__ == "__main__":
    main()
