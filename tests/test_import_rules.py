"""The layering docs/architecture.md draws, checked on every module's imports (function-level ones too).

- the engine (`rollout.engine`) imports nothing above it: no launcher, server, client, CLI, `LLM` or replay;
- the sampler replay (`rollout.replay`, trainer-side) imports the engine's sampling code but no server,
  client, launcher or `LLM`;
- the kernels (`rollout.ops`) import no transformers and nothing of the engine, the bridge or the server;
- only the commands (and the demo, which starts a server) import the server;
- the trajectory recorder (`rollout.trajectories`) imports no torch, engine, server or front end;
- the protocol imports neither the server nor the client; the client imports no torch (but for the
  weight pusher, which the client loads on its first push: `import rollout.client` stays torch-free).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.import_graph import ROOT, module_name, sources
from tests.import_graph import imported_names as imported_modules

ABOVE_ENGINE = (
    "rollout.llm",
    "rollout.engine_factory",
    "rollout.distributed",
    "rollout.server",
    "rollout.client",
    "rollout.commands",
    "rollout.cli",
    "rollout.demo",
    "rollout.bench",
    "rollout.fleet",
    "rollout.replay",
    "trainer_plugins",
)
RULES: dict[str, tuple[str, ...]] = {
    "rollout.engine": ABOVE_ENGINE,
    "rollout.ops": ("transformers", "rollout.engine", "rollout.hf", "rollout.server", "rollout.client"),
    "rollout.hf": ("rollout.engine", "rollout.server", "rollout.client", "rollout.llm"),
    "rollout.protocol": ("rollout.server", "rollout.client", "rollout.engine", "rollout.llm"),
    "rollout.client": ("torch", "transformers", "rollout.engine", "rollout.server", "rollout.llm"),
    "rollout.weights": ("rollout.server", "rollout.client", "rollout.llm", "rollout.commands"),
    # the trajectory recorder runs in a trainer's or an agent's process, under its `openai` client
    "rollout.trajectories": (
        "torch",
        "transformers",
        "fastapi",
        "rollout.engine",
        "rollout.server",
        "rollout.openai",
    ),
    "rollout.replay": (
        "rollout.server",
        "rollout.client",
        "rollout.llm",
        "rollout.commands",
        "trainer_plugins",
    ),
}
EXEMPT = {  # push tensors; imported lazily by the client (weight_push imports group_pusher)
    "rollout.client.weight_push": ("torch",),
    "rollout.client.group_pusher": ("torch",),
}
SERVER_IMPORTERS = (
    "rollout.server",
    "rollout.commands",
    "rollout.demo",
    "rollout.bench",
    "rollout.fleet",
    "rollout.openai",  # the OpenAI-compatible front end runs on the server's engine loop
)


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(mod: str, names: set[str]) -> list[str]:
    found = []
    for name in sorted(names):
        for package, forbidden in RULES.items():
            if within(mod, package):
                allowed = EXEMPT.get(mod, ())
                found += [
                    f"{mod} imports {name}"
                    for f in forbidden
                    if within(name, f) and not any(within(name, a) for a in allowed)
                ]
        if within(name, "rollout.server") and not any(within(mod, p) for p in SERVER_IMPORTERS):
            found.append(f"{mod} imports {name} (only commands and the demo may import the server)")
    return found


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_keeps_the_import_rules(path: Path) -> None:
    assert violations(module_name(path), imported_modules(path)) == []


@pytest.mark.parametrize(
    ("mod", "name"),
    [
        ("rollout.engine.llm_engine", "rollout.distributed.launch"),
        ("rollout.ops.backends", "transformers"),
        ("rollout.client.rollout_client", "torch"),
        ("rollout.llm", "rollout.server.prompts"),
        ("rollout.replay.sampler_replay", "rollout.client"),
        ("rollout.engine.sample.sampler", "rollout.replay"),
    ],
)
def test_the_checker_reports_a_broken_rule(mod: str, name: str) -> None:
    """So that a pass above means something: each rule, broken on purpose, is reported."""
    assert violations(mod, {name}) != []


def test_importing_the_client_loads_no_torch_transformers_or_engine() -> None:
    """A process that only sends prompts pays for grpc and the stubs, not for the engine."""
    code = (
        "import sys, rollout.client; "
        "print(sorted(m for m in ('torch', 'transformers', 'rollout.engine', 'rollout.llm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
