"""Shared pytest setup for every test module: keep it small and generic.

- The repository root is importable (`import runtime`, `from tests.tiny_models import …`) however
  pytest is started.
- `tiny_checkpoint(arch)` builds a tiny random checkpoint once per test session (see
  tests/tiny_models.py); tests must treat the directory as read-only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A function arch -> Path of a tiny checkpoint ("gpt2", "bart", "t5", "marian"), cached."""
    from tests.tiny_models import make_checkpoint

    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            made[arch] = make_checkpoint(arch, tmp_path_factory.mktemp(f"tiny-{arch}"))
        return made[arch]

    return get
