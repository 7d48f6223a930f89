"""Start `rollout serve` on loopback, query it with `RolloutClient`, read its info and metrics.

python examples/serve_and_query.py
"""

from __future__ import annotations

import socket
import subprocess
import sys

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.tasks import addition


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "rollout.cli", "serve", "--port", str(port)])
    try:
        with RolloutClient(f"127.0.0.1:{port}", timeout=60) as client:
            client.wait_until_ready(120)
            info = client.server_info()
            print(f"serving {info.model} ({info.dtype}), weight version {info.weight_version}")
            prompts = addition.make_prompts(3, seed=1)
            outputs = client.generate(prompts, SamplingParams(n=2, max_tokens=8, temperature=0.7, logprobs=0))
            for prompt, output in zip(prompts, outputs, strict=True):
                texts = [sample.text for sample in output.outputs]
                print(f"{prompt} -> {texts} (answer {addition.answer(prompt)})")
            metrics = client.metrics().splitlines()
            print("\n".join(line for line in metrics if line.startswith("rollout_") and "tokens" in line))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
