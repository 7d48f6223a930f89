"""docs/models.md is exactly what scripts/gen_models_doc.py renders from the zoo's lists."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_models_doc_matches_the_zoo() -> None:
    spec = importlib.util.spec_from_file_location("gen_models_doc", ROOT / "scripts" / "gen_models_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "models.md").read_text() == module.render(), (
        "run python scripts/gen_models_doc.py"
    )
