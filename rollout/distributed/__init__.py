"""Tensor parallelism: N ranks over torch.distributed, rank 0 schedules and samples, every rank runs its shard.

`group` (process groups, who is the driver), `sharding` (loading through the model's transformers
tensor-parallel plan), `step_broadcast` (one broadcast per step, the workers' loop),
`sharded_weights` (weight updates committed on every rank or none), `launch` (starting the ranks).
"""
