"""Structured outputs: what a sample must follow (StructuredOutputsParams, structured_outputs.py), the grammars
compiled for one tokenizer from it, on a server within a time and number bound (compile_pool.py,
compile_server.py), and each sample's matcher (grammar_state.py); the sampler applies the masks
(engine/sample/grammar_mask.py).

The one place that imports the grammar library (xgrammar, extra `rollout[structured]`; docs/structured_outputs.md),
and only in the modules that compile or match: importing this package face loads plain data only.
"""

from rollout.structured_outputs.structured_outputs import StructuredOutputsParams

__all__ = ["StructuredOutputsParams"]
