"""What one engine step launches: device kernels per step and the kernels that take the most time.

The decode step at batch 1 ran at 5.45x the weight-read floor on an H200 (docs/benchmarks.md); counting
ATen ops on CPU suggests about 1,100 small kernels per step (transformers' unfused RMSNorm, rotary and
SiLU·mul around 7 matmuls per layer). This profiles the real step with torch.profiler so the next lease
names the cause from the device's own timeline. On CPU it reports CPU ops (the harness check).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def profile_steps(step: Callable[[], object], steps: int, device: str, top: int = 8) -> str:
    """Runs `step` `steps` times under torch.profiler; a few lines: kernels per step, top kernels."""
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            if cuda:
                torch.cuda.synchronize()
    except Exception as err:  # a profiler the sandbox refuses must not cost the phase its figures
        return f"    profile failed: {type(err).__name__}: {err}"
    events = [e for e in prof.key_averages() if _on_device(e, cuda)]
    timed = sorted(events, key=lambda e: _self_us(e, cuda), reverse=True)
    total_us = sum(_self_us(e, cuda) for e in events)
    count = sum(e.count for e in events)
    where = "device kernels" if cuda else "CPU ops"
    lines = [
        f"    {count / steps:.0f} {where} per step, {total_us / steps / 1e3:.3f} ms of their time per step"
    ]
    for e in timed[:top]:
        share = _self_us(e, cuda) / max(total_us, 1e-9)
        lines.append(f"      {share:6.1%}  {e.count / steps:6.1f}/step  {e.key[:90]}")
    return "\n".join(lines)


def _on_device(event, cuda: bool) -> bool:
    if not cuda:
        return event.self_cpu_time_total > 0
    return event.device_type == torch.autograd.DeviceType.CUDA and _self_us(event, cuda) > 0


def _self_us(event, cuda: bool) -> float:
    return event.self_device_time_total if cuda else event.self_cpu_time_total
