"""FastAPI and uvicorn stay behind the `openai` extra: only rollout/openai/ imports them (and the
fleet's Ray Serve ingress, rollout/fleet/ingress.py and its sleep routes ingress_sleep.py, behind the
`fleet` extra)."""

from __future__ import annotations

from tests.test_import_rules import imported_modules, module_name, sources, within

HTTP_STACK = ("fastapi", "uvicorn", "starlette")
FLEET_INGRESS = ("rollout.fleet.ingress", "rollout.fleet.ingress_sleep")


def test_only_the_openai_package_imports_the_http_stack() -> None:
    offenders = [
        f"{module_name(path)} imports {name}"
        for path in sources()
        if not within(module_name(path), "rollout.openai") and module_name(path) not in FLEET_INGRESS
        for name in imported_modules(path)
        if any(within(name, stack) for stack in HTTP_STACK)
    ]
    assert offenders == []
