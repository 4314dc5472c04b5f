import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


@pytest.fixture
def in_repo(monkeypatch):
    """Run with the repository root as the working directory (paths in messages are relative)."""
    monkeypatch.chdir(REPO)
    return REPO


@pytest.fixture
def golden():
    return check_golden


def check_golden(path: Path, text: str) -> None:
    """Compare with a pinned file; UPDATE_GOLDEN=1 rewrites it instead."""
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"golden file missing: {path} (run with UPDATE_GOLDEN=1 to create it)")
        path.write_text(text, encoding="utf-8")
        return
    assert text == path.read_text(encoding="utf-8"), f"output differs from {path.name} (UPDATE_GOLDEN=1 to accept)"
