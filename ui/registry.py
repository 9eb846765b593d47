"""Find model bundles on disk and keep one loaded `runtime.Generator` per bundle.

A model directory is either a bundle (manifest.json), an optimum export (config.json), or a
family of bundles, one per precision (`models/bible-lm/int8`, `models/bible-lm/fp32`). Each
bundle gets a display name "family (precision)". This module does not build any UI.
"""

from __future__ import annotations

import threading
from pathlib import Path

import runtime


def _is_model(path: Path) -> bool:
    return (path / "manifest.json").exists() or (path / "config.json").exists()


class ModelRegistry:
    def __init__(self, paths: dict[str, Path]):
        self.paths = paths  # display name -> bundle directory
        self._loaded: dict[str, runtime.Generator] = {}
        self._lock = threading.Lock()

    @classmethod
    def discover(cls, roots) -> ModelRegistry:
        paths: dict[str, Path] = {}
        for root in map(Path, roots):
            if not root.is_dir():
                continue
            candidates = [root] if _is_model(root) else sorted(p for p in root.iterdir() if p.is_dir())
            for path in candidates:
                if _is_model(path):
                    paths[path.name] = path
                    continue
                for bundle in sorted(p for p in path.iterdir() if _is_model(p)):
                    paths[f"{path.name} ({bundle.name})"] = bundle
        return cls(paths)

    @property
    def names(self) -> list[str]:
        return list(self.paths)

    def get(self, name: str) -> runtime.Generator:
        """The loaded generator for `name` (loaded once, shared by all users)."""
        if name not in self.paths:
            raise ValueError(f"unknown model {name!r}; available: {', '.join(self.paths)}")
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = runtime.load(self.paths[name])
            return self._loaded[name]
