"""The verse table (data/verses.tsv): its columns and splits, reading it, and its WEB chapters.

train/data.py builds and writes the table from the SWORD Bibles; every recipe of train/ reads it,
and so does export/ngram_index.py, whose memorisation index must hash exactly the text the Bible
LM trained on (the WEB chapters of the training books). The reading lives here, in export/, the
lowest layer that both may import: runtime/ never reads training corpora, and modeling/ holds
model definitions only. It needs nothing but the standard library.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

TRANSLATIONS = ("web", "kjv", "rv1909")  # the table's text columns (train/data.py's MODULES)
COLUMNS = ("book", "chapter", "verse", "testament", "section", "split", *TRANSLATIONS)
SPLITS = ("train", "validation", "test")
DEFAULT_OUT = Path("data/verses.tsv")


def load_verses(path: str | Path = DEFAULT_OUT, split: str | None = None) -> list[dict]:
    """Rows of a verses TSV as dicts (chapter and verse as int), optionally only one split.
    Raises ValueError for an unknown split or a file without the table's columns."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"`split` must be one of {SPLITS}, got {split!r}")
    with Path(path).open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path} must have the columns {COLUMNS}, got {reader.fieldnames}")
        rows = []
        for row in reader:
            row["chapter"], row["verse"] = int(row["chapter"]), int(row["verse"])
            if split is None or row["split"] == split:
                rows.append(row)
    return rows


@dataclass
class Chapter:
    book: str
    chapter: int
    section: str  # section label, e.g. "Law"
    verses: list[str]


def chapters(rows: list[dict], split: str) -> list[Chapter]:
    """WEB chapters of one split, verses in order; verses WEB lacks are skipped."""
    out: dict[tuple[str, int], Chapter] = {}
    for row in rows:
        if row["split"] != split or not row["web"]:
            continue
        key = (row["book"], row["chapter"])
        if key not in out:
            out[key] = Chapter(row["book"], row["chapter"], row["section"], [])
        out[key].verses.append(row["web"])
    return list(out.values())
