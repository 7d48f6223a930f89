"""The continuous-batching engine. The loop at the top: llm_engine (step = schedule -> execute -> update),
scheduler, block_manager, the runner seam and model_runner, input_batch, the decode graphs and their buffers,
engine_weights; what it uses below, one concept per sub-package: requests/, output/, kv/, sample/, model/,
hybrid/, versions/."""
