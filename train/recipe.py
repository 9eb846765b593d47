"""The recipe contract: what `scriptorium train RECIPE` (train/cli.py) needs of a recipe.

A recipe (train/lm.py's BibleLM, train/seq2seq/recipes.py's Rewriter and Translator,
train/masked_lm.py's MaskedLM) subclasses `Recipe`: it is built with
`(tiny, verses, tokenizer_dir, out_dir, seed)`, sets the attributes and implements the methods
below without a body, and inherits the defaults of the others (`finish_model_dir`, `export`,
`card_files`) unless its task needs more.

Does not cover: the training loop (train/common.py's `train`), what the CLI does with a recipe
(train/cli.py). The hierarchical model has its own command (train/hierarchical/cli.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from train import common


class Recipe(Protocol):
    name: str  # model name: the run's name and models/<name>/ when shipped
    task_kind: str  # the bundle's task: "causal-lm", "seq2seq" or "fill-mask"
    tiny: bool  # seconds-long run on the committed fixture (tests); skips the graph optimizer
    size: Any  # the recipe's size dataclass (written to training.json)
    tokenizer: Any  # the `tokenizers.Tokenizer` the model is trained with

    def setup(self) -> tuple[torch.nn.Module, common.Task, common.TrainConfig]:
        """The model to train, its training task and the loop's settings."""
        ...

    def controls(self) -> dict:
        """The manifest's control tokens (`convert.manifest.check_controls` format)."""
        ...

    def generation(self) -> dict:
        """The checkpoint's generation_config.json fields (the bundle's generation defaults)."""
        ...

    def description(self) -> str:
        """One paragraph for the model card and the manifest."""
        ...

    def training_data(self) -> dict:
        """The manifest's `training_data`: corpus, split and licence facts."""
        ...

    def evaluate(self, model, bundle_dir: Path, progress: bool = True) -> dict:
        """Metrics and samples of the trained model, measured through the runtime on the
        exported bundle (written to the run's evaluation.json)."""
        ...

    def metrics(self, evaluation: dict) -> dict:
        """The headline numbers of `evaluation` for the manifest and the card."""
        ...

    def card_sections(self, evaluation: dict) -> list[tuple[str, str]]:
        """(title, Markdown) sections the model card adds after the generated part."""
        ...

    def finish_model_dir(self, model_dir: Path) -> None:
        """Adjust the saved Hugging Face checkpoint before export. Default: nothing to adjust."""

    def export(
        self,
        model_dir: Path,
        out_dir: Path,
        precision: str,
        name: str,
        progress: bool = True,
        optimize: bool = True,
    ) -> dict:
        """Export the checkpoint to a bundle; return its manifest. Default: the generation
        exporter (`common.export`)."""
        return common.export(model_dir, out_dir, precision, name, progress, optimize)

    def card_files(self, out: Path) -> list[Path]:
        """Files of the run directory `out` the card shows besides the loss plot. Default: none."""
        return []
