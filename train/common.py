"""Training machinery the recipes share: the loop, checkpoints and resume, loss logs and plots.

Covers: one `TrainConfig` per run; AdamW with linear warm-up and cosine decay; the training loop
with a tqdm bar, periodic validation, atomic checkpoints (model + optimizer + scheduler + RNG
states + data position + step) and `resume`; the loss CSV and its PNG plot; the checkpoint
directory a recipe hands to `export.export_bundle` (weights, tokenizer with its post-processor,
`scriptorium_controls.json`, `scriptorium_card.json`); and shipping bundles with a full model card.

Time budgets are in optimizer steps. `max_minutes` is an optional extra stop measured as active
training time: the sum of step durations, where a step that took far longer than the recent
median (the process was paused with SIGSTOP, or the machine suspended) counts as the median.

Does not cover: data formats, models and metrics of a recipe (train/lm.py, train/seq2seq/bart.py).
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import shutil
import signal
import statistics
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from train import data
from train.tokenizer import EN_CONTROL_TOKENS, train_tokenizer, training_texts

CHECKPOINT = "checkpoint.pt"  # latest training state, replaced atomically
LOSS_CSV = "loss.csv"
LOSS_PNG = "loss.png"
MODEL_DIR = "model"  # Hugging Face checkpoint directory (export's input)
EVALUATION = "evaluation.json"  # metrics and samples of the finished model
CSV_COLUMNS = ("step", "epoch", "tokens", "lr", "train_loss", "val_loss", "train_seconds")
PAUSE_FACTOR = 10  # a step slower than this × the recent median was paused, not working
THREADS = 2  # default torch intra-op threads: the machine has two cores


@dataclass(frozen=True)
class TrainConfig:
    steps: int  # optimizer steps of the whole run (the schedule's length)
    lr: float  # peak learning rate, reached after `warmup` steps
    warmup: int  # steps of linear warm-up from 0
    min_lr_ratio: float = 0.1  # the cosine decay ends at lr × min_lr_ratio
    weight_decay: float = 0.1  # AdamW decay on weight matrices (not biases, norms)
    beta2: float = 0.98  # AdamW's second-moment decay (beta1 = 0.9)
    clip: float = 1.0  # largest global gradient norm
    log_every: int = 10  # steps between rows of the loss CSV
    eval_every: int = 100  # steps between validation losses (a multiple of log_every)
    checkpoint_every: int = 50  # steps between checkpoints
    seed: int = 0  # seeds model init, data order and dropout

    def __post_init__(self):
        for name in ("steps", "warmup", "log_every", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (0 if name == "warmup" else 1):
                raise ValueError(f"`{name}` must be a positive int, got {value!r}")
        if self.eval_every % self.log_every:
            raise ValueError(
                f"`eval_every` must be a multiple of `log_every` ({self.log_every}), "
                f"got {self.eval_every}"
            )


class Task:
    """What the loop needs from a recipe: batches per epoch and a validation loss.

    A batch is a dict of tensors for `model(**batch)` with `labels` (-100 = not predicted).
    `batches(epoch)` must be deterministic given the epoch (the loop re-creates it on resume).
    """

    def batches(self, epoch: int) -> list[dict]:
        raise NotImplementedError

    def validation_loss(self, model) -> float:
        raise NotImplementedError

    def loss(self, model, batch: dict) -> torch.Tensor:
        """The training loss of one batch (default: the model's own cross-entropy)."""
        return model(**batch).loss


def bf16_autocast(enabled: bool = True):
    """bfloat16 autocast on the CPU for a training forward pass: matmuls in bfloat16, weights,
    gradients and optimizer state in float32 (about 1.6× faster per step on AVX512-BF16 CPUs)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_threads(threads: int = THREADS) -> None:
    torch.set_num_threads(threads)


def lr_lambda(config: TrainConfig) -> Callable[[int], float]:
    """Multiplier of the peak lr at a step: linear warm-up, then cosine down to min_lr_ratio.

    >>> f = lr_lambda(TrainConfig(steps=110, lr=1e-3, warmup=10))
    >>> [round(f(s), 3) for s in (0, 5, 10, 60, 110)]
    [0.0, 0.5, 1.0, 0.55, 0.1]
    """

    def multiplier(step: int) -> float:
        if step < config.warmup:
            return step / config.warmup
        progress = min(1.0, (step - config.warmup) / max(1, config.steps - config.warmup))
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        return config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine

    return multiplier


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; weight decay only on parameters with two or more dimensions (matrices)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, config.beta2))


def atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary file beside `path`, then rename over it (never half-written)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def rng_state() -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


class LossLog:
    """The loss CSV: one row every `log_every` steps; validation loss on eval steps."""

    def __init__(self, path: Path):
        self.path = path

    def start(self) -> None:
        with self.path.open("w", newline="") as handle:
            csv.writer(handle).writerow(CSV_COLUMNS)

    def truncate(self, step: int) -> None:
        """Keep the rows up to `step` (a resumed run rewrites what came after its checkpoint)."""
        rows = self.rows() if self.path.exists() else []
        self.start()
        with self.path.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, CSV_COLUMNS)
            writer.writerows(row for row in rows if int(row["step"]) <= step)

    def append(self, row: dict) -> None:
        with self.path.open("a", newline="") as handle:
            csv.DictWriter(handle, CSV_COLUMNS).writerow(row)

    def rows(self) -> list[dict]:
        with self.path.open(newline="") as handle:
            return list(csv.DictReader(handle))


def plot_losses(csv_path: Path, png_path: Path, title: str) -> None:
    """Train and validation loss against step, as a PNG for the model card."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = LossLog(csv_path).rows()
    train = [(int(r["step"]), float(r["train_loss"])) for r in rows if r["train_loss"]]
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    if train:
        ax.plot(*zip(*train), label="train", linewidth=1)
    if val:
        ax.plot(*zip(*val), label="validation", marker="o", markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


class _StopRequest:
    """Turns SIGTERM into a flag the loop checks after each step (it then checkpoints and ends)."""

    def __init__(self):
        self.requested = False
        self.previous = None

    def __enter__(self):
        try:
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: no handler, SIGTERM keeps its default
            self.previous = None
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _batch_tokens(batch: dict) -> int:
    return int((batch["labels"] != -100).sum())


class _ActiveTime:
    """Active training time: each step's duration, except that a step that took more than
    PAUSE_FACTOR times the median of the recent ones (the process was paused) counts as that
    median."""

    def __init__(self):
        self.recent: deque[float] = deque(maxlen=20)

    def count(self, elapsed: float) -> float:
        median = statistics.median(self.recent) if len(self.recent) >= 5 else None
        counted = median if median is not None and elapsed > PAUSE_FACTOR * median else elapsed
        self.recent.append(counted)
        return counted

    def steps_per_second(self) -> float:
        return len(self.recent) / sum(self.recent)


def _save_checkpoint(path: Path, model, optimizer, scheduler, state: dict, config: TrainConfig):
    atomic_save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
            "state": dict(state),
            "config": asdict(config),
        },
        path,
    )


def _start_state(
    checkpoint_path: Path, resume: bool, model, optimizer, scheduler, config: TrainConfig, log
) -> dict:
    """The loop's state (step, epoch, index, tokens, train_seconds): restored with the model,
    optimizer, scheduler and RNGs from the checkpoint when resuming one, else a fresh start
    (refused over an existing checkpoint)."""
    if checkpoint_path.exists() and not resume:
        raise FileExistsError(
            f"{checkpoint_path} exists: pass --resume to continue it, or choose another --out"
        )
    if not (resume and checkpoint_path.exists()):
        log.start()
        return {"step": 0, "epoch": 0, "index": 0, "tokens": 0, "train_seconds": 0.0}
    saved = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
    if saved["config"]["steps"] != config.steps or saved["config"]["seed"] != config.seed:
        raise ValueError(
            f"{checkpoint_path} was made with steps={saved['config']['steps']}, "
            f"seed={saved['config']['seed']}; this run has steps={config.steps}, "
            f"seed={config.seed}"
        )
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    set_rng_state(saved["rng"])
    state = saved["state"]
    log.truncate(state["step"])
    return state


def _optimizer_step(model, task: Task, batch, optimizer, scheduler, config: TrainConfig):
    """One training step on `batch`; returns its loss tensor."""
    model.train()
    loss = task.loss(model, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def _log_row(state: dict, scheduler, window: list[float], val_loss: str) -> dict:
    """The loss CSV's row for the step just taken; `window` holds the losses since the last row."""
    return {
        "step": state["step"],
        "epoch": state["epoch"],
        "tokens": state["tokens"],
        "lr": f"{scheduler.get_last_lr()[0]:.6g}",
        "train_loss": f"{sum(window) / len(window):.5f}",
        "val_loss": val_loss,
        "train_seconds": f"{state['train_seconds']:.1f}",
    }


def train(
    model: torch.nn.Module,
    task: Task,
    config: TrainConfig,
    out_dir: Path,
    resume: bool = False,
    max_steps: int | None = None,
    max_minutes: float | None = None,
    progress: bool = True,
    describe: str = "train",
    threads: int = THREADS,
) -> dict:
    """Train `model` on `task` until `config.steps` (or an earlier stop); return the state.

    out_dir/checkpoint.pt is written every `checkpoint_every` steps and when the run stops;
    `resume` continues from it (same weights, optimizer, schedule, RNG and data position, so a
    resumed run computes the same losses as an uninterrupted one). Without `resume` an existing
    checkpoint is an error. `max_steps` stops this invocation at that step (the schedule still
    spans `config.steps`); `max_minutes` stops it after that much active training time.
    `threads` torch threads (two runs side by side on two cores do more work at one each).
    The returned state has step, epoch, tokens, train_seconds and finished (step == steps).
    """
    set_threads(threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_path = out_dir / CHECKPOINT
    log = LossLog(out_dir / LOSS_CSV)
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config))
    state = _start_state(checkpoint_path, resume, model, optimizer, scheduler, config, log)

    stop_at = min(config.steps, max_steps or config.steps)
    batches = task.batches(state["epoch"])
    active_time = _ActiveTime()
    window: list[float] = []
    bar = tqdm(
        total=config.steps,
        initial=state["step"],
        desc=describe,
        unit="step",
        disable=not progress,
        dynamic_ncols=True,
    )
    with bar, _StopRequest() as stop:
        while state["step"] < stop_at:
            if state["index"] >= len(batches):
                state["epoch"] += 1
                state["index"] = 0
                batches = task.batches(state["epoch"])
            batch = batches[state["index"]]
            started = time.perf_counter()
            loss = _optimizer_step(model, task, batch, optimizer, scheduler, config)
            state["train_seconds"] += active_time.count(time.perf_counter() - started)
            state["step"] += 1
            state["index"] += 1
            state["tokens"] += _batch_tokens(batch)
            window.append(loss.item())
            step = state["step"]
            bar.update()
            bar.set_postfix(
                loss=f"{window[-1]:.3f}",
                epoch=state["epoch"],
                sps=f"{active_time.steps_per_second():.2f}",
            )
            if step % config.log_every == 0 or step == stop_at:
                val = ""
                if step % config.eval_every == 0 or step == config.steps:
                    val = f"{task.validation_loss(model):.5f}"
                log.append(_log_row(state, scheduler, window, val))
                window = []
            over_time = max_minutes is not None and state["train_seconds"] >= 60 * max_minutes
            if (
                step % config.checkpoint_every == 0
                or step == stop_at
                or over_time
                or stop.requested
            ):
                _save_checkpoint(checkpoint_path, model, optimizer, scheduler, state, config)
            if over_time or stop.requested:
                break
    state["finished"] = state["step"] >= config.steps
    return state


def steps_per_second(csv_path: Path) -> float | None:
    """Training steps per second of active time, from the last row of the loss CSV."""
    rows = LossLog(csv_path).rows()
    if not rows or not float(rows[-1]["train_seconds"]):
        return None
    return int(rows[-1]["step"]) / float(rows[-1]["train_seconds"])


# ---------------------------------------------------------------------------------------------
# The checkpoint directory export reads


def save_tokenizer(tokenizer, model_dir: Path) -> None:
    """tokenizer.json (with its post-processor) + transformers' files, so AutoTokenizer opens it.

    The bundle gets this tokenizer.json unchanged, so the runtime encodes exactly as training did.
    """
    from train.tokenizer import as_transformers

    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "tokenizer.json"
    tokenizer.save(str(path))
    as_transformers(path).save_pretrained(str(model_dir))
    tokenizer.save(str(path))  # keep our file byte for byte (save_pretrained rewrites it)


def save_model_dir(
    model, tokenizer, model_dir: Path, controls: dict, card: dict, generation: dict
) -> None:
    """The Hugging Face checkpoint directory export_bundle reads (docs/bundle.md)."""
    from transformers import GenerationConfig

    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(model_dir))
    GenerationConfig(**generation).save_pretrained(str(model_dir))
    save_tokenizer(tokenizer, model_dir)
    write_json(model_dir / "scriptorium_controls.json", controls)
    write_json(model_dir / "scriptorium_card.json", card)


def write_json(path: Path, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def read_json(path: Path):
    return json.loads(path.read_text())


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


# ---------------------------------------------------------------------------------------------
# Data and tokenizers


def split_description() -> str:
    """The fixed split (train/data.py) in one sentence, for training-data cards."""
    held = defaultdict(list)
    for book, split in data.HELD_OUT.items():
        held[split].append(book)
    return (
        f"by whole books; validation: {', '.join(held['validation'])}; test: "
        f"{', '.join(held['test'])}; every other book is training"
    )


def load_or_train_tokenizer(
    rows, tokenizer_dir: Path, out_dir: Path, tiny: bool, name: str, vocab_size: int
):
    """The data engineer's tokenizer `name` (en / en_es) from `tokenizer_dir`, or, in tiny mode
    or when it is missing, one trained with train/tokenizer.py's recipe (saved under out_dir)."""
    from tokenizers import Tokenizer

    columns, controls = {
        "en": (("web", "kjv"), EN_CONTROL_TOKENS),
        "en_es": (("web", "rv1909"), ()),
    }[name]
    path = tokenizer_dir / f"{name}.json"
    if not tiny and path.exists():
        return Tokenizer.from_file(str(path))
    own = out_dir / f"tokenizer-{name}.json"
    if own.exists():
        return Tokenizer.from_file(str(own))
    return train_tokenizer(training_texts(rows, columns), vocab_size, controls, own)


# ---------------------------------------------------------------------------------------------
# Shipping


def export(
    model_dir: Path, out_dir: Path, precision: str, name: str, progress: bool, optimize: bool = True
) -> dict:
    """export.export_bundle with the checkpoint's own controls and card (`optimize`: run
    onnxruntime's transformer optimizer; tiny runs skip it to stay fast)."""
    from export import export_bundle

    if out_dir.exists() and not (out_dir / "manifest.json").exists():
        shutil.rmtree(out_dir)  # a leftover from an interrupted run
    return export_bundle(
        model_dir, out_dir, precision=precision, name=name, optimize=optimize, progress=progress
    )


def finish_card(bundle_dir: Path, sections: Sequence[tuple[str, str]], files: Sequence[Path]):
    """Append recipe sections (samples, limits, …) to the bundle's README, add `files` (the loss
    plot), and seal the bundle again (convert.manifest.seal: manifest.json's checksums)."""
    from convert import manifest as bundle_manifest

    manifest = bundle_manifest.Manifest.read(bundle_dir / "manifest.json")
    for path in files:
        shutil.copyfile(path, bundle_dir / path.name)
    if manifest.task == "fill-mask":
        from export.fill_mask import model_card
    else:
        model_card = bundle_manifest.model_card
    card = model_card(manifest).rstrip("\n")
    for title, body in sections:
        card += f"\n\n## {title}\n\n{body.strip()}"
    (bundle_dir / "README.md").write_text(card + "\n")
    return bundle_manifest.seal(bundle_dir, manifest, ensure_ascii=False)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A Markdown table; floats below 10 get 3 significant digits, larger ones one decimal.

    >>> print(markdown_table(["a", "b"], [[1, 0.25]]))
    | a | b |
    |---|---|
    | 1 | 0.25 |
    """

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
