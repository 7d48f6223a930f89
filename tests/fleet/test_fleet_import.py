"""Without Ray, `rollout.fleet` says how to get it, and the single-server path never imports Ray."""

from __future__ import annotations

import subprocess
import sys

from tests.serve_process import REPO_ROOT


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)


def test_importing_the_fleet_without_ray_names_the_extra() -> None:
    result = _run("import sys; sys.modules['ray'] = None; import rollout.fleet")
    assert result.returncode != 0
    assert 'pip install "rollout[ray]"' in result.stderr


def test_the_client_and_server_do_not_import_ray() -> None:
    code = "import sys, rollout.client, rollout.server.app, rollout.cli; print('ray' in sys.modules)"
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
