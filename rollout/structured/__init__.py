"""Structured outputs: grammars compiled for one tokenizer, and the per-sample matchers that mask logits.

The one place that imports the grammar library (xgrammar, extra `rollout[structured]`; docs/structured_outputs.md).
"""
