"""The library: clean English sentences from every public-domain (or permissively licensed)
English text Debian ships, one JSON object per paragraph, for the recipes that want more text than
the verse table (issue 24).

Sources (see SOURCES): the WEB and KJV training books (from data/verses.tsv, train split only),
Matthew Henry's Concise Commentary (`mod2imp MHCC`, whose entries repeat once per verse they cover:
each distinct entry is kept once; the 410 MB export is streamed), the Scofield Reference Notes,
Spurgeon's *Treasury of David* (all sections), GCIDE (Webster 1913 definitions and literary
quotations), Bierce's *Devil's Dictionary* and WordNet's glosses and examples.

Output (`data/library.jsonl`): `{"source", "ref", "sentences": [...]}` per paragraph (a Bible
chapter, a commentary paragraph, a dictionary entry, a WordNet synset), sentences in order, so a
recipe can pair consecutive sentences within a paragraph.

Cleaning: markup stripped (OSIS, GCIDE's dictd markup), entities unescaped, curly quotes made
straight, `--` made a dash, whitespace collapsed; paragraphs split into sentences; a sentence is
dropped as a fragment when it has fewer than MIN_WORDS words, does not open with a capital (or
digit) and close with . ! or ?, is mostly digits and symbols, holds characters outside Latin
script, or looks non-English: no English function word and fewer than half of its words known
from the Bibles' training text (Latin, Greek transliterations, word lists). Sentences
are deduplicated across the whole library (first source wins).

Held out: commentary entries keyed to a held-out book (train.data.HELD_OUT) or to a Psalm that
train/spurgeon.py uses for validation or test are skipped; every sentence whose normalised words
occur inside a held-out verse (WEB or KJV) is dropped, and so is any non-Bible sentence that
quotes a whole held-out verse of LEAK_VERSE_WORDS words or more.

    python -m train.library --out data/library.jsonl            # all sources, about 2 minutes
    python -m train.library --fixture                           # rewrites tests/fixtures/library/

Does not cover: tokenizers, recipes (train/word_vectors.py, train/masked_lm.py and
train/hierarchical/recipes.py read the output with `load_library`). docs/DATA.md is its data card.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from train import data

DEFAULT_OUT = Path("data/library.jsonl")
FIXTURE_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "library"

# source -> (what it is, licence)
SOURCES = {
    "web": ("World English Bible, training books (data/verses.tsv)", "Public Domain"),
    "kjv": ("King James Version, training books (data/verses.tsv)", "Public Domain"),
    "mhcc": ("Matthew Henry's Concise Commentary (sword-comm-mhcc 2.0)", "Public Domain"),
    "scofield": ("Scofield Reference Notes, 1917 (sword-comm-scofield 2.1)", "Public Domain"),
    "tdavid": ("Spurgeon, The Treasury of David (sword-comm-tdavid 2.1)", "Public Domain"),
    "gcide": (
        "GCIDE: Webster 1913 definitions and quotations (dict-gcide 0.48.5)",
        "GPL-2.0-or-later (the GCIDE compilation; its 1913 Webster text is public domain)",
    ),
    "devil": ("Bierce, The Devil's Dictionary, 1911 (dict-devil 1.0)", "Public Domain"),
    "wordnet": ("WordNet 3.0 glosses and examples (wordnet-base 3.0)", "WordNet 3.0 licence"),
}
SWORD_MODULES = {"mhcc": "MHCC", "scofield": "Scofield", "tdavid": "TDavid"}
GCIDE_PATH = Path("/usr/share/dictd/gcide")  # .index and .dict.dz
DEVIL_PATH = Path("/usr/share/dictd/devil")
WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")

MIN_WORDS = 4  # shorter sentences are headwords, labels and fragments
MAX_WORDS = 200  # longer ones are lists or failed sentence splits
LEAK_VERSE_WORDS = 8  # a non-Bible sentence quoting a whole held-out verse this long is dropped

# ---------------------------------------------------------------------------------------------
# Text normalisation and sentences

_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "´": "'"})
_DASH_RE = re.compile(r"\s*--+\s*")
_SPACE_BEFORE_RE = re.compile(r"\s+([,.;:?!)\]])")
_EMPTY_PARENS_RE = re.compile(r"\(\s*[,;:.\s]*\)|\[\s*[,;:.\s]*\]")
_DOUBLE_PUNCT_RE = re.compile(r"([,;:])\s*(?=[,;:.?!])")


def normalize(text: str) -> str:
    """Entities unescaped, quotes straight, `--` as a dash, whitespace collapsed, no space before
    closing punctuation, no empty brackets (what dropped references leave).

    >>> normalize("He said, &quot;Come”  -- and ( ; ) went .")
    'He said, "Come"—and went.'
    """
    text = html.unescape(text).replace("``", '"').replace("''", '"').translate(_QUOTES)
    text = text.replace("`", "'")
    text = _DASH_RE.sub("—", text)
    text = " ".join(text.split())
    text = _EMPTY_PARENS_RE.sub("", text)
    text = _DOUBLE_PUNCT_RE.sub("", " ".join(text.split()))
    return _SPACE_BEFORE_RE.sub(r"\1", text).strip()


# Words whose period does not end a sentence (lower-cased, without the period).
ABBREVIATIONS = frozenset(
    "mr mrs dr st ver vs viz cf ch chap comp i.e e.g ibid lib sect vol p pp ps rev gen ex deut "
    "matt mk lk jn rom cor gal eph col heb jas pet obs lat gr heb fr ger l esp fig no".split()
)
_SENTENCE_END_RE = re.compile(r"[.!?]['\")\]]*\s+(?=['\"(\[]*[A-Z0-9])")
_WORD_BEFORE_RE = re.compile(r"(\S+)$")


def split_sentences(text: str) -> list[str]:
    """Sentences of normalised text: a break after . ! or ? (and closing quotes) before a capital
    or digit, except after an abbreviation (ABBREVIATIONS) or a single capital (an initial).

    >>> split_sentences("Mr. Keys helped me. See Ps. 23. It is J. Smith's! Yes.")
    ['Mr. Keys helped me.', 'See Ps. 23.', "It is J. Smith's!", 'Yes.']
    """
    sentences, start = [], 0
    for match in _SENTENCE_END_RE.finditer(text):
        before = _WORD_BEFORE_RE.search(text[start : match.start() + 1])
        word = before.group(1).rstrip(".").lstrip("('\"[").lower() if before else ""
        if text[match.start()] == "." and (
            word in ABBREVIATIONS or (len(word) == 1 and word.isalpha())
        ):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


FUNCTION_WORDS = frozenset(
    "the a an of and to in is are was were be that it he she his her they them their we you i "
    "for with as not by this which or from but on at all who what have has had shall will my "
    "me our us your him its thou thee thy thine ye hath hast doth dost can did do does may "
    "might must should would could so if then than there when where how why".split()
)
_LETTERS_RE = re.compile(r"[A-Za-z]")
_WORDS_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
_OPENS_RE = re.compile(r"^['\"(\[]*[A-Z0-9]")
_CLOSES_RE = re.compile(r"[.!?]['\")\]]*$")
# Characters of English prose: ASCII plus Latin-script letters with diacritics and typography.
_ALLOWED_EXTRA = set("—–…éèêëàâäáçïîíôöóüûúæœÆŒñÉÈÀ°£§¶†")


def fragment_reason(sentence: str, lexicon: frozenset[str] = frozenset()) -> str | None:
    """Why a sentence is dropped as a fragment, or None when it is a clean English sentence.
    `lexicon`: lower-cased words known to be English (the Bibles' training text); a sentence
    without a function word still passes when at least half of its words are in it."""
    words = _WORDS_RE.findall(sentence)
    if len(words) < MIN_WORDS:
        return "short"
    if len(words) > MAX_WORDS:
        return "overlong"
    if any(ord(c) > 127 and c not in _ALLOWED_EXTRA for c in sentence):
        return "non-English characters"
    if not _OPENS_RE.match(sentence) or not _CLOSES_RE.search(sentence):
        return "no capital start or end punctuation"
    visible = sentence.replace(" ", "")
    if len(_LETTERS_RE.findall(visible)) < 0.6 * len(visible):
        return "numbers and symbols"
    lowered = [w.lower() for w in words]
    if not any(w in FUNCTION_WORDS for w in lowered):
        if 2 * sum(w.replace("'", "") in lexicon for w in lowered) < len(lowered):
            return "not English (no function word, few known words)"
    return None


def words_of(text: str) -> list[str]:
    """Lower-cased letter and digit runs: the form the leak guard and dedup compare."""
    return re.findall(r"[a-z0-9]+", text.lower().replace("'", ""))


# ---------------------------------------------------------------------------------------------
# Paragraphs of each source: (ref, text) pairs, text normalised but not yet split


def bible_paragraphs(rows: list[dict], column: str) -> Iterator[tuple[str, str]]:
    """One paragraph per chapter of the training books that have `column` text."""
    chapter: list[str] = []
    key = None
    for row in rows:
        if row["split"] != "train" or not row[column]:
            continue
        if (row["book"], row["chapter"]) != key:
            if chapter:
                yield f"{key[0]} {key[1]}", normalize(" ".join(chapter))
            key, chapter = (row["book"], row["chapter"]), []
        chapter.append(row[column])
    if chapter:
        yield f"{key[0]} {key[1]}", normalize(" ".join(chapter))


_PARAGRAPH_BREAK_RE = re.compile(
    r'<div [^>]*type="(?:x-p|introduction|paragraph)"[^>]*/>|</?list[^>]*>|</?item[^>]*>|<lb[^>]*/>'
)
_VERSE_LABEL_RE = re.compile(r"^(?:Verses?|Ver\.)\s+[\d\s,\-–&.]*\d\.?\s*", re.I)


def commentary_paragraphs(
    imp_lines: Iterable[str], held_out_psalms: set[int], skipped: Counter
) -> Iterator[tuple[str, str]]:
    """Paragraphs of a SWORD commentary's mod2imp export: each distinct entry once (MHCC repeats
    an entry under every verse it covers), entries of held-out books and psalms skipped, headings
    and references dropped, leading "Verse 3." labels removed."""
    seen_entries: set[bytes] = set()
    seen_paragraphs: set[bytes] = set()
    for sword_book, chapter, verse, raw in data.parse_imp(imp_lines):
        if not raw.strip():
            continue
        digest = hashlib.blake2b(raw.encode(), digest_size=16).digest()
        if digest in seen_entries:
            skipped["repeated entry"] += 1
            continue
        seen_entries.add(digest)
        book = data._BOOK_BY_SWORD_NAME.get(sword_book, sword_book)
        if book in data.HELD_OUT or (book == "Psalms" and chapter in held_out_psalms):
            skipped["held-out book or psalm entry"] += 1
            continue
        for piece in _PARAGRAPH_BREAK_RE.split(raw):
            text = _VERSE_LABEL_RE.sub("", normalize(data.osis_to_text(piece)))
            if not text:
                continue
            # MHCC's entry for a verse repeats its section's paragraphs with other milestones
            digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
            if digest in seen_paragraphs:
                skipped["repeated paragraph"] += 1
                continue
            seen_paragraphs.add(digest)
            yield f"{book} {chapter}:{verse}", text


def read_dictd(index_path: Path, dict_path: Path) -> Iterator[tuple[str, str]]:
    """(headword, entry text) of a dictd database, each stored entry once, in file order.
    Entries are decoded as UTF-8, falling back to Windows-1252 (GCIDE holds a few such bytes)."""
    opener = gzip.open if dict_path.suffix == ".dz" else open
    with opener(dict_path, "rb") as handle:
        blob = handle.read()
    seen = set()
    for line in index_path.read_text(encoding="utf-8").splitlines():
        headword, offset, length = line.split("\t")[:3]
        if headword.startswith("00") or (offset, length) in seen:
            continue
        seen.add((offset, length))
        start, size = _dictd_number(offset), _dictd_number(length)
        chunk = blob[start : start + size]
        try:
            yield headword, chunk.decode("utf-8")
        except UnicodeDecodeError:
            yield headword, chunk.decode("cp1252", errors="replace")


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _dictd_number(text: str) -> int:
    """dictd's base-64 offsets and lengths (most significant digit first)."""
    value = 0
    for char in text:
        value = value * 64 + _B64.index(char)
    return value


def _dictd_encode(value: int) -> str:
    digits = ""
    while True:
        digits = _B64[value % 64] + digits
        value //= 64
        if value == 0:
            return digits


_SOURCE_MARK_RE = re.compile(r"^\s*\[[^\[\]]*\]\s*$")  # "[1913 Webster]", "[PJC]", "[Obs.]"
_DIACRITIC_RE = re.compile(r"\[([=.^\"'`~,]?)([A-Za-z]{1,2})(?:um|ae)?\]")
_INNER_BRACKETS_RE = re.compile(r"\[[^\[\]]*\]")
_SENSE_RE = re.compile(r"^(?:\d+\.|\([a-z]\)|\(\d+\))\s*")
_LABEL_RE = re.compile(r"^\((?:[A-Z][\w.]*\s?)+\)\s*")  # "(Mar. Law)", "(Bot.)"
_CITATION_RE = re.compile(r"\s--\s?(?=[A-Z0-9]).*$", re.S)
_INLINE_CITATION_RE = re.compile(r"([.!?][\"']?|[\"'])—[A-Z][^—\"]{0,60}$")  # "…"—Chaucer.
_QUOTE_INDENT = 9  # GCIDE indents literary quotations by 12 spaces, definitions by 3 or 6


def gcide_paragraphs(entries: Iterable[tuple[str, str]], skipped: Counter):
    """One paragraph per GCIDE entry: its definitions, usage notes and literary quotations
    (citations "--Shak." cut), without the headword line, pronunciation, etymology, labels and
    synonym lists."""
    for headword, text in entries:
        lines = text.splitlines()
        depth, body_start = 0, len(lines)
        for number, line in enumerate(lines):  # the header ends where its brackets close
            depth += line.count("[") - line.count("]")
            if depth <= 0:
                body_start = number + 1
                break
        runs: list[tuple[bool, list[str]]] = []
        for line in lines[body_start:]:
            if not line.strip() or _SOURCE_MARK_RE.match(line):
                runs.append((False, []))
                continue
            quote = len(line) - len(line.lstrip()) >= _QUOTE_INDENT
            if not runs or runs[-1][0] != quote or (not quote and _SENSE_RE.match(line.strip())):
                runs.append((quote, []))
            runs[-1][1].append(line.strip())
        for quote, run_lines in runs:
            chunk = " ".join(run_lines)
            if not chunk:
                continue
            if chunk.startswith("Syn:"):
                skipped["GCIDE synonym list"] += 1
                continue
            chunk = _CITATION_RE.sub("", chunk) if quote else chunk
            chunk = _DIACRITIC_RE.sub(r"\2", chunk)
            while _INNER_BRACKETS_RE.search(chunk):
                chunk = _INNER_BRACKETS_RE.sub("", chunk)
            chunk = re.sub(r"\\[^\\]*\\", "", chunk).replace("{", "").replace("}", "")
            chunk = re.sub(r"^(?:Note|Usage):\s*", "", chunk)
            chunk = _LABEL_RE.sub("", _SENSE_RE.sub("", chunk))
            chunk = normalize(chunk.replace(" . . . ", " ... "))
            chunk = _INLINE_CITATION_RE.sub(r"\1", chunk)
            if chunk:
                yield headword, chunk


_DEVIL_HEAD_RE = re.compile(r"^[A-Z][A-Z'\-. ]*[A-Z.],?\s+(?:(?:[a-z]+\.\s*)+)?")


def devil_paragraphs(entries: Iterable[tuple[str, str]], skipped: Counter):
    """Each Devil's Dictionary entry's prose, without its headword and part of speech; indented
    verse and the attributions under it are dropped."""
    for headword, text in entries:
        prose = []
        for block in re.split(r"\n\s*\n", text):
            if block.startswith((" ", "\t")):
                skipped["Devil's Dictionary verse block"] += 1
                continue
            prose.append(" ".join(block.split()))
        joined = _DEVIL_HEAD_RE.sub("", " ".join(prose).replace("_", ""), count=1)
        if joined.strip():
            yield headword.title(), normalize(joined)


_WORDNET_EXAMPLE_RE = re.compile(r'"([^"]+)"')
_WORDNET_AUTHOR_RE = re.compile(r'(?<=")\s+-\s*[A-Z][^;"]*')  # "…" - Samuel Johnson


def wordnet_paragraphs(lines: Iterable[str]):
    """One paragraph per WordNet synset: each gloss definition, then each example, as sentences
    (capitalised, a final period added where missing)."""
    for line in lines:
        if line.startswith("  ") or "|" not in line:  # licence header
            continue
        fields = line.split(" ")
        offset, word = fields[0], fields[4].replace("_", " ")
        gloss = _WORDNET_AUTHOR_RE.sub("", line.split("|", 1)[1].strip())
        examples = _WORDNET_EXAMPLE_RE.findall(gloss)
        definitions = _WORDNET_EXAMPLE_RE.sub("", gloss)
        parts = [d.strip(" ;,") for d in definitions.split(";")] + [e.strip() for e in examples]
        sentences = [_as_sentence(p) for p in parts if p.strip(" ;,-")]
        if sentences:
            yield f"{word} ({offset})", " ".join(sentences)


def _as_sentence(text: str) -> str:
    text = text.strip()
    text = text[0].upper() + text[1:]
    return text if _CLOSES_RE.search(text) else text + "."


# ---------------------------------------------------------------------------------------------
# The leak guard


class LeakGuard:
    """Held-out verses (WEB and KJV) indexed by word trigrams: `reason(sentence)` says whether
    the sentence occurs inside a held-out verse, or (with `whole_verses`) quotes one whole."""

    def __init__(self, verses: Iterable[str]):
        self.verses = [w for w in (words_of(v) for v in verses) if w]
        self.positions: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        self.starts: dict[tuple, list[int]] = defaultdict(list)
        for index, words in enumerate(self.verses):
            for position in range(len(words) - 2):
                self.positions[tuple(words[position : position + 3])].append((index, position))
            if len(words) >= LEAK_VERSE_WORDS:
                self.starts[tuple(words[:3])].append(index)

    def reason(self, sentence: str, whole_verses: bool) -> str | None:
        words = words_of(sentence)
        if len(words) >= 3:
            for index, position in self.positions.get(tuple(words[:3]), ()):
                if self.verses[index][position : position + len(words)] == words:
                    return "occurs in a held-out verse"
        if whole_verses:
            for start in range(len(words) - LEAK_VERSE_WORDS + 1):
                for index in self.starts.get(tuple(words[start : start + 3]), ()):
                    verse = self.verses[index]
                    if words[start : start + len(verse)] == verse:
                        return "quotes a whole held-out verse"
        return None


def bible_lexicon(rows: list[dict]) -> frozenset[str]:
    """Lower-cased words of the WEB and KJV training verses: words known to be English."""
    return frozenset(
        w for r in rows if r["split"] == "train" for c in ("web", "kjv") for w in words_of(r[c])
    )


def held_out_verses(rows: list[dict]) -> list[str]:
    return [r[c] for r in rows if r["split"] != "train" for c in ("web", "kjv") if r[c]]


# ---------------------------------------------------------------------------------------------
# Building


@dataclass
class SourceStats:
    paragraphs: int = 0
    sentences: int = 0
    words: int = 0
    seconds: float = 0.0
    dropped: Counter = field(default_factory=Counter)  # reason -> sentences (or entries)


_ENUMERATION_RE = re.compile(r"^(?:\(\d+\)|\([a-z]\)|\d+\.)\s+(?=[A-Z\"'])")


def clean_paragraphs(
    source: str,
    paragraphs: Iterable[tuple[str, str]],
    guard: LeakGuard,
    seen: set[bytes],
    stats: SourceStats,
    lexicon: frozenset[str] = frozenset(),
) -> Iterator[dict]:
    """Library records of one source's paragraphs: split, fragments and leaks dropped, sentences
    already in the library (any source) dropped; empty paragraphs left out."""
    bible = source in ("web", "kjv")
    for ref, text in paragraphs:
        kept = []
        for sentence in split_sentences(text):
            sentence = _ENUMERATION_RE.sub("", sentence)
            reason = fragment_reason(sentence, lexicon) or guard.reason(
                sentence, whole_verses=not bible
            )
            if reason is None:
                digest = hashlib.blake2b(" ".join(words_of(sentence)).encode(), digest_size=12)
                if digest.digest() in seen:
                    reason = "duplicate"
                else:
                    seen.add(digest.digest())
            if reason:
                stats.dropped[reason] += 1
                continue
            kept.append(sentence)
        if kept:
            stats.paragraphs += 1
            stats.sentences += len(kept)
            stats.words += sum(len(s.split()) for s in kept)
            yield {"source": source, "ref": ref, "sentences": kept}


@dataclass
class Inputs:
    """Where each source is read from: the installed packages, or the test fixture's files."""

    verses: Path = data.DEFAULT_OUT
    sword: dict[str, Path] | None = None  # source -> mod2imp output file; None runs mod2imp
    gcide: Path = GCIDE_PATH
    devil: Path = DEVIL_PATH
    wordnet: Path = WORDNET_DIR
    held_out_psalms: set[int] | None = None  # None: train/spurgeon.py's split, computed

    @classmethod
    def fixture(cls, directory: Path = FIXTURE_DIR) -> Inputs:
        return cls(
            verses=data.FIXTURE,
            sword={s: directory / f"{s}.imp" for s in SWORD_MODULES},
            gcide=directory / "gcide",
            devil=directory / "devil",
            wordnet=directory,
            held_out_psalms=set(json.loads((directory / "held_out_psalms.json").read_text())),
        )


def sword_lines(inputs: Inputs, source: str) -> Iterator[str]:
    """mod2imp's export of one module, line by line (streamed: MHCC's is 410 MB)."""
    if inputs.sword is not None:
        with open(inputs.sword[source], encoding="utf-8") as handle:
            yield from handle
        return
    with subprocess.Popen(
        ["mod2imp", SWORD_MODULES[source]],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
        errors="replace",
    ) as process:
        yield from process.stdout
    if process.returncode:
        raise RuntimeError(f"mod2imp {SWORD_MODULES[source]} failed ({process.returncode})")


def spurgeon_held_out_psalms(inputs: Inputs, rows: list[dict]) -> set[int]:
    """Every Psalm from the first validation Psalm to the last test Psalm of train/spurgeon.py's
    split (validation and test are consecutive runs of Psalms)."""
    from runtime import hierarchical_text
    from train import spurgeon

    charset = hierarchical_text.default_charset(r["web"] for r in rows)
    psalms = spurgeon.build(list(sword_lines(inputs, "tdavid")), charset)["psalms"]
    return set(range(psalms["validation"][0], psalms["test"][1] + 1))


def source_paragraphs(source: str, inputs: Inputs, rows, psalms, skipped: Counter):
    if source in ("web", "kjv"):
        return bible_paragraphs(rows, source)
    if source in SWORD_MODULES:
        return commentary_paragraphs(sword_lines(inputs, source), psalms, skipped)
    if source == "gcide":
        return gcide_paragraphs(read_dictd(*_dictd_files(inputs.gcide)), skipped)
    if source == "devil":
        return devil_paragraphs(read_dictd(*_dictd_files(inputs.devil)), skipped)
    lines = (
        line
        for name in WORDNET_FILES
        if (inputs.wordnet / name).exists()
        for line in (inputs.wordnet / name).read_text(encoding="utf-8").splitlines()
    )
    return wordnet_paragraphs(lines)


def _dictd_files(stem: Path) -> tuple[Path, Path]:
    compressed = stem.with_name(stem.name + ".dict.dz")
    plain = stem.with_name(stem.name + ".dict")
    return stem.with_name(stem.name + ".index"), compressed if compressed.exists() else plain


def build(
    out: Path, inputs: Inputs, sources: Iterable[str] = SOURCES, progress: bool = True
) -> dict:
    """Write the library to `out`; returns {"stats": {source: SourceStats}, "held_out_psalms",
    "leak_verses", "seconds"}."""
    from tqdm import tqdm

    started = time.perf_counter()
    rows = data.load_verses(inputs.verses)
    psalms = inputs.held_out_psalms
    if psalms is None:
        psalms = spurgeon_held_out_psalms(inputs, rows)
    guard = LeakGuard(held_out_verses(rows))
    lexicon = bible_lexicon(rows)
    seen: set[bytes] = set()
    stats: dict[str, SourceStats] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as handle:
        for source in sources:
            if source not in SOURCES:
                raise ValueError(f"`sources` must be among {', '.join(SOURCES)}, got {source!r}")
            stats[source] = SourceStats()
            source_started = time.perf_counter()
            skipped = stats[source].dropped
            paragraphs = source_paragraphs(source, inputs, rows, psalms, skipped)
            records = clean_paragraphs(source, paragraphs, guard, seen, stats[source], lexicon)
            for record in tqdm(records, desc=source, disable=not progress, mininterval=2):
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            stats[source].seconds = time.perf_counter() - source_started
    return {
        "stats": stats,
        "held_out_psalms": sorted(psalms),
        "leak_verses": len(guard.verses),
        "seconds": time.perf_counter() - started,
    }


def load_library(path: Path, sources: Iterable[str] | None = None) -> list[dict]:
    """The library's records (optionally only some sources)."""
    wanted = set(sources) if sources is not None else None
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return [r for r in records if wanted is None or r["source"] in wanted]


def library_counts(path: Path) -> dict[str, dict[str, int]]:
    """Paragraphs, sentences and words (whitespace tokens) per source of a library file, in the
    order the sources first appear."""
    counts: dict[str, dict[str, int]] = {}
    for record in load_library(path):
        count = counts.setdefault(record["source"], {"paragraphs": 0, "sentences": 0, "words": 0})
        count["paragraphs"] += 1
        count["sentences"] += len(record["sentences"])
        count["words"] += sum(len(s.split()) for s in record["sentences"])
    return counts


def summarize(result: dict) -> str:
    """The data card's table (markdown) and the dropped counts per source."""
    from train.common import markdown_table

    stats: dict[str, SourceStats] = result["stats"]
    rows = [
        [s, f"{st.paragraphs:,}", f"{st.sentences:,}", f"{st.words:,}", SOURCES[s][1]]
        for s, st in stats.items()
    ]
    rows.append(
        [
            "**total**",
            f"{sum(s.paragraphs for s in stats.values()):,}",
            f"{sum(s.sentences for s in stats.values()):,}",
            f"**{sum(s.words for s in stats.values()):,}**",
            "",
        ]
    )
    table = markdown_table(["source", "paragraphs", "sentences", "words", "licence"], rows)
    reasons = sorted({r for st in stats.values() for r in st.dropped})
    dropped = markdown_table(
        ["dropped", *stats],
        [[r, *(f"{st.dropped.get(r, 0):,}" for st in stats.values())] for r in reasons],
    )
    seconds = ", ".join(f"{s} {st.seconds:.0f} s" for s, st in stats.items())
    return (
        f"{table}\n\n{dropped}\n\nHeld-out Psalms (train/spurgeon.py's validation and test): "
        f"{result['held_out_psalms'][0]}-{result['held_out_psalms'][-1]}; leak guard over "
        f"{result['leak_verses']:,} held-out verses (WEB and KJV).\n"
        f"Wall time {result['seconds']:.0f} s ({seconds})."
    )


# ---------------------------------------------------------------------------------------------
# The test fixture: a few entries of each source, in each source's own format

FIXTURE_SWORD_KEYS = {
    "mhcc": (("Genesis", 1), ("Genesis", 2), ("Judges", 1), ("Psalms", 23), ("Psalms", 62)),
    "scofield": (("Genesis", 1), ("Mark", 1), ("Matthew", 5)),
    "tdavid": (("Psalms", 1), ("Psalms", 23), ("Psalms", 62)),
}
FIXTURE_HEADWORDS = {
    "gcide": ("Abandon", "Ceil", "Love", "Lamb", "Shepherd", "Sheep"),
    "devil": ("abasement", "abdication", "abdomen", "abracadabra", "bible", "christian"),
}
FIXTURE_WORDNET_LINES = 40  # synsets taken from each data.* file


_SECTION_START_RE = re.compile(r"(?=<title)")
_PARAGRAPH_END_RE = re.compile(r'(<div eID="[^"]*" type="x-p"/>)')


def _fixture_slice(raw: str, paragraphs: int = 2, chars: int = 1200) -> str:
    """The first paragraphs of each section of an entry (its markup intact), for the fixture."""
    sections = []
    for section in _SECTION_START_RE.split(raw):
        kept = "".join(_PARAGRAPH_END_RE.split(section)[: 2 * paragraphs])  # text, end, …
        sections.append(kept[:chars].rsplit(">", 1)[0] + ">" if len(kept) > chars else kept)
    text = "".join(sections).replace("\n", " ")
    return text[: 3 * chars].rsplit(">", 1)[0] + ">" if len(text) > 3 * chars else text


def write_fixture(directory: Path = FIXTURE_DIR) -> None:
    """Slices of the installed sources, in their own formats, under tests/fixtures/library/."""
    directory.mkdir(parents=True, exist_ok=True)
    real = Inputs()
    for source, keys in FIXTURE_SWORD_KEYS.items():
        wanted = {(data.BOOKS[b][0], c) for b, c in keys}  # SWORD book names
        kept, per_key = [], Counter()
        for sword_book, chapter, verse, raw in data.parse_imp(sword_lines(real, source)):
            key = (sword_book, chapter)
            if key in wanted and raw.strip() and per_key[key] < 3:
                per_key[key] += 1
                kept.append(f"$$${sword_book} {chapter}:{verse}\n{_fixture_slice(raw)}\n")
        (directory / f"{source}.imp").write_text("".join(kept), encoding="utf-8")
    for source, headwords in FIXTURE_HEADWORDS.items():
        index, dict_path = _dictd_files(GCIDE_PATH if source == "gcide" else DEVIL_PATH)
        entries = [(h, t) for h, t in read_dictd(index, dict_path) if h in headwords]
        blob, index_lines = b"", []
        for headword, text in entries:
            encoded = text.encode("utf-8")
            index_lines.append(
                f"{headword}\t{_dictd_encode(len(blob))}\t{_dictd_encode(len(encoded))}"
            )
            blob += encoded
        (directory / f"{source}.dict").write_bytes(blob)
        (directory / f"{source}.index").write_text("\n".join(index_lines) + "\n")
    for name in WORDNET_FILES:
        lines = (WORDNET_DIR / name).read_text(encoding="utf-8").splitlines()
        synsets = [line for line in lines if not line.startswith("  ")]
        step = max(1, len(synsets) // FIXTURE_WORDNET_LINES)
        (directory / name).write_text("\n".join(synsets[::step][:FIXTURE_WORDNET_LINES]) + "\n")
    (directory / "held_out_psalms.json").write_text(json.dumps(list(range(61, 78))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.library", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--verses", type=Path, default=data.DEFAULT_OUT)
    parser.add_argument(
        "--sources", nargs="+", default=list(SOURCES), help=f"any of {', '.join(SOURCES)}"
    )
    parser.add_argument(
        "--fixture", action="store_true", help="rewrite tests/fixtures/library/ and stop"
    )
    parser.add_argument("--from-fixture", action="store_true", help="read the fixture's files")
    args = parser.parse_args(argv)
    if args.fixture:
        write_fixture()
        print(f"wrote {FIXTURE_DIR}")
        return 0
    inputs = Inputs.fixture() if args.from_fixture else Inputs(verses=args.verses)
    if not inputs.verses.exists():
        raise FileNotFoundError(f"{inputs.verses} not found: build it with `python -m train.data`")
    result = build(args.out, inputs, args.sources)
    print(summarize(result))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
