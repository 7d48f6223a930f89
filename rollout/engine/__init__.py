"""The continuous-batching engine: requests, block manager, scheduler, model runner, sampler."""
