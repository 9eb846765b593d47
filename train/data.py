"""The data recipe: three verse-aligned public-domain Bibles as one verse table.

Covers: checking that Debian's SWORD modules are installed, exporting them with `mod2imp`, turning
their OSIS markup into plain verse text, aligning the World English Bible (WEB), the King James
Version (KJV) and the Reina-Valera 1909 (RV1909) by book/chapter/verse, labelling each verse with
its testament, section (the LM's conditioning label) and the fixed train/validation/test split,
writing the table as TSV (reading it: export/corpus.py), and the length filters that turn it
into KJV->WEB and WEB->RV1909 training pairs.

Does not cover: tokenizers (train/tokenizer.py), control-token formatting, or training.

    python -m train.data                  # writes data/verses.tsv and prints counts
    python -m train.data --fixture        # also rewrites tests/fixtures/verses.tsv

docs/DATA.md is the data card: sources, licence, markup rules, split, filters and counts.
"""

from __future__ import annotations

import argparse
import csv
import html
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

# The table's columns and splits, and reading it (`load_verses`), are export/corpus.py's (below
# both train/ and export/ngram_index.py); the recipes read the table as `data.load_verses`.
from export.corpus import COLUMNS, DEFAULT_OUT, SPLITS, TRANSLATIONS, load_verses  # noqa: F401

INSTALL_COMMAND = "apt-get install -y sword-text-web sword-text-kjv sword-text-sparv libsword-utils"

# Table column -> SWORD module it is read from.
MODULES = dict(zip(TRANSLATIONS, ("engWEB2015eb", "engKJV2006eb", "spaRV1909eb")))

# The committed slice of the table that tests use (no apt packages needed); see FIXTURE_PASSAGES.
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "verses.tsv"

# Section label -> control token the LM is conditioned on (seed 000's genre tokens).
SECTIONS = {
    "Law": "<|law|>",
    "History": "<|history|>",
    "Wisdom & Poetry": "<|wisdom|>",
    "Prophets": "<|prophets|>",
    "Gospels": "<|gospels|>",
    "Acts & Letters": "<|letters|>",
    "Apocalyptic": "<|apocalyptic|>",
}

LAW, HIST, WIS, PROPH, GOSP, LETT, APOC = SECTIONS

# (name in the table, name in mod2imp's `$$$Book C:V` headers, section), in canonical order.
# Daniel goes with Revelation: its visions (chapters 7-12) are the Old Testament's apocalypse.
OLD_TESTAMENT = (
    ("Genesis", "Genesis", LAW),
    ("Exodus", "Exodus", LAW),
    ("Leviticus", "Leviticus", LAW),
    ("Numbers", "Numbers", LAW),
    ("Deuteronomy", "Deuteronomy", LAW),
    ("Joshua", "Joshua", HIST),
    ("Judges", "Judges", HIST),
    ("Ruth", "Ruth", HIST),
    ("1 Samuel", "I Samuel", HIST),
    ("2 Samuel", "II Samuel", HIST),
    ("1 Kings", "I Kings", HIST),
    ("2 Kings", "II Kings", HIST),
    ("1 Chronicles", "I Chronicles", HIST),
    ("2 Chronicles", "II Chronicles", HIST),
    ("Ezra", "Ezra", HIST),
    ("Nehemiah", "Nehemiah", HIST),
    ("Esther", "Esther", HIST),
    ("Job", "Job", WIS),
    ("Psalms", "Psalms", WIS),
    ("Proverbs", "Proverbs", WIS),
    ("Ecclesiastes", "Ecclesiastes", WIS),
    ("Song of Solomon", "Song of Solomon", WIS),
    ("Isaiah", "Isaiah", PROPH),
    ("Jeremiah", "Jeremiah", PROPH),
    ("Lamentations", "Lamentations", PROPH),
    ("Ezekiel", "Ezekiel", PROPH),
    ("Daniel", "Daniel", APOC),
    ("Hosea", "Hosea", PROPH),
    ("Joel", "Joel", PROPH),
    ("Amos", "Amos", PROPH),
    ("Obadiah", "Obadiah", PROPH),
    ("Jonah", "Jonah", PROPH),
    ("Micah", "Micah", PROPH),
    ("Nahum", "Nahum", PROPH),
    ("Habakkuk", "Habakkuk", PROPH),
    ("Zephaniah", "Zephaniah", PROPH),
    ("Haggai", "Haggai", PROPH),
    ("Zechariah", "Zechariah", PROPH),
    ("Malachi", "Malachi", PROPH),
)
NEW_TESTAMENT = (
    ("Matthew", "Matthew", GOSP),
    ("Mark", "Mark", GOSP),
    ("Luke", "Luke", GOSP),
    ("John", "John", GOSP),
    ("Acts", "Acts", LETT),
    ("Romans", "Romans", LETT),
    ("1 Corinthians", "I Corinthians", LETT),
    ("2 Corinthians", "II Corinthians", LETT),
    ("Galatians", "Galatians", LETT),
    ("Ephesians", "Ephesians", LETT),
    ("Philippians", "Philippians", LETT),
    ("Colossians", "Colossians", LETT),
    ("1 Thessalonians", "I Thessalonians", LETT),
    ("2 Thessalonians", "II Thessalonians", LETT),
    ("1 Timothy", "I Timothy", LETT),
    ("2 Timothy", "II Timothy", LETT),
    ("Titus", "Titus", LETT),
    ("Philemon", "Philemon", LETT),
    ("Hebrews", "Hebrews", LETT),
    ("James", "James", LETT),
    ("1 Peter", "I Peter", LETT),
    ("2 Peter", "II Peter", LETT),
    ("1 John", "I John", LETT),
    ("2 John", "II John", LETT),
    ("3 John", "III John", LETT),
    ("Jude", "Jude", LETT),
    ("Revelation", "Revelation of John", APOC),
)
# WEB's deuterocanon: English-only rows (no KJV or RV1909 text), always in the training split, so
# they enlarge the LM corpus and never reach a pair task. Left out: Esther (Greek), which repeats
# Hebrew Esther and whose additions the module files under the wrong verses, and the Greek
# additions to Daniel (Prayer of Azariah, Susanna, Bel), whose verses are empty in this module
# (their text sits unversified in a heading). II Esdras is an apocalypse (4 Ezra).
DEUTEROCANON = (
    ("Tobit", "Tobit", HIST),
    ("Judith", "Judith", HIST),
    ("Wisdom of Solomon", "Wisdom", WIS),
    ("Sirach", "Sirach", WIS),
    ("Baruch", "Baruch", PROPH),
    ("1 Maccabees", "I Maccabees", HIST),
    ("2 Maccabees", "II Maccabees", HIST),
    ("1 Esdras", "I Esdras", HIST),
    ("Prayer of Manasseh", "Prayer of Manasses", WIS),
    ("Psalm 151", "Additional Psalm", WIS),
    ("3 Maccabees", "III Maccabees", HIST),
    ("2 Esdras", "II Esdras", APOC),
    ("4 Maccabees", "IV Maccabees", HIST),
)
EXCLUDED_BOOKS = ("Esther (Greek)", "Prayer of Azariah", "Susanna", "Bel and the Dragon")

BOOKS = {
    name: (sword, testament, section)
    for testament, books in (("OT", OLD_TESTAMENT), ("NT", NEW_TESTAMENT), ("DC", DEUTEROCANON))
    for name, sword, section in books
}
_BOOK_BY_SWORD_NAME = {sword: name for name, (sword, _, _) in BOOKS.items()}

# The one fixed split, by whole books. Every book not listed here is "train". Both held-out splits
# mix testaments and sections; Apocalyptic has only two canonical books and stays whole in train so
# the LM learns its section token. John (test) is the gospel with the fewest synoptic parallels.
HELD_OUT = {
    "Judges": "validation",
    "Ecclesiastes": "validation",
    "Hosea": "validation",
    "Joel": "validation",
    "Amos": "validation",
    "Mark": "validation",
    "James": "validation",
    "Leviticus": "test",
    "Ruth": "test",
    "Song of Solomon": "test",
    "Jonah": "test",
    "Micah": "test",
    "John": "test",
    "Galatians": "test",
}


def split_of(book: str) -> str:
    """The split a book belongs to: "train", "validation" or "test"."""
    if book not in BOOKS:
        raise ValueError(f"`book` must be one of the {len(BOOKS)} known books, got {book!r}")
    return HELD_OUT.get(book, "train")


# ---------------------------------------------------------------------------------------------
# OSIS markup -> plain text

# Elements dropped together with everything inside them: footnotes and cross references (and the
# references, alternate readings and catch words that live in them), non-canonical headings, and
# the speaker labels WEB puts in the Song of Solomon.
_DROPPED = {"note", "title", "speaker", "reference", "rdg", "catchWord"}
# Elements whose text is verse text and which sit inside a line: no space around them.
_INLINE = {"w", "transChange", "divineName", "q", "seg", "foreign", "hi", "name", "abbr"}

_TOKEN_RE = re.compile(r"<[^>]*>|[^<]+")
_TAG_RE = re.compile(r"<(/?)([A-Za-z]+)([^>]*?)(/?)>")
_ATTR_RE = re.compile(r'([\w:-]+)="([^"]*)"')
_SPACE_BEFORE_RE = re.compile(r"\s+([,.;:?!)\]’”])")
_SPACE_AFTER_RE = re.compile(r"([(\[“‘¿¡])\s+")
_USFM_MARKER_RE = re.compile(r"\\\+?[a-z]+\d*\*?\s*")  # stray USFM: KJV's "\nd LORD"


def osis_to_text(raw: str, keep_psalm_titles: bool = True) -> str:
    """Plain text of one verse's OSIS markup as mod2imp prints it.

    Keeps the words inside <w>, <transChange>, <divineName>, <q>, <seg>, <foreign>, <hi>; drops
    <note> (footnotes, cross references), <title> (except, when `keep_psalm_titles`, the canonical
    psalm superscriptions, which are verse text in Hebrew and in RV1909), speaker labels, and all
    milestones (<div/>, <chapter/>, <l/>, <lg/>, <lb/>, <milestone/>), which become a space.
    Everything after the end of a book (WEB appends its glossary to Revelation 22:21) is dropped.
    Pilcrows go; entities are unescaped; whitespace is collapsed, with no space before closing
    punctuation or after opening punctuation.

    >>> osis_to_text('<w lemma="strong:H0430">God</w><note placement="foot">Elohim</note>'
    ...              '<w lemma="strong:H1254">created</w> the <transChange>earth</transChange>.')
    'God created the earth.'
    """
    pieces: list[str] = []
    open_elements: list[tuple[str, bool]] = []  # (name, drops its content)
    for token in _TOKEN_RE.findall(raw):
        tag = _TAG_RE.fullmatch(token)
        dropping = bool(open_elements) and open_elements[-1][1]
        if tag is None:
            if not dropping:
                pieces.append(token)
            continue
        closing, name, attr_text, self_closing = tag.groups()
        attrs = dict(_ATTR_RE.findall(attr_text))
        if name == "div" and (
            attrs.get("type") == "glossary" or (attrs.get("type") == "book" and "eID" in attrs)
        ):
            break
        if closing:
            names = [n for n, _ in open_elements]
            if name in names:
                del open_elements[len(names) - 1 - names[::-1].index(name) :]
            if name not in _INLINE:
                pieces.append(" ")
        elif self_closing:
            pieces.append(" ")
        else:
            drops = name in _DROPPED and not (
                keep_psalm_titles
                and name == "title"
                and attrs.get("type") == "psalm"
                and attrs.get("canonical") == "true"
            )
            open_elements.append((name, dropping or drops))
            if name not in _INLINE:
                pieces.append(" ")
    text = html.unescape("".join(pieces)).replace("¶", " ")
    text = _USFM_MARKER_RE.sub("", text)
    text = " ".join(text.split())
    text = _SPACE_BEFORE_RE.sub(r"\1", text)
    return _SPACE_AFTER_RE.sub(r"\1", text)


_LEMMA_RE = re.compile(r'lemma="strong:([^"]*)"')
_STRONGS_RE = re.compile(r"\b([GH])0*(\d+)\b")
_NOTE_RE = re.compile(r"<note\b.*?</note>", re.S)


def strongs_numbers(raw: str) -> frozenset[str]:
    """The Strong's numbers tagged on a verse's words (not in its notes), e.g. {"H430", "G2316"}.

    >>> raw = '<w lemma="strong:H0430">God</w><note><w lemma="strong:H1">x</w></note>'
    >>> sorted(strongs_numbers(raw))
    ['H430']
    """
    lemmas = " ".join(_LEMMA_RE.findall(_NOTE_RE.sub("", raw)))  # e.g. "G0609 G0846"
    return frozenset(p + n for p, n in _STRONGS_RE.findall(lemmas))


# Psalm 119's acrostic headings as RV1909 spells them (KJV and WEB mark theirs as titles).
_HEBREW_LETTERS = (
    "ALEPH BETH GIMEL DALETH HE VAU ZAIN CHETH TETH JOD CAPH LAMED MEM NUN SAMECH AIN PE TZADDI "
    "COPH RESH SIN TAU"
).split()
_ACROSTIC_HEADING_RE = re.compile(rf"^(?:{'|'.join(_HEBREW_LETTERS)})\.?\s+")
# RV1909 ends most Pauline letters with the subscription ("Escrita de Roma ...") as verse text;
# KJV marks the same subscriptions as titles.
_SUBSCRIPTION_RE = re.compile(r"(Amén\.)\s+[^.]*?\b(?:[Ee]scrita|[Ee]nviada)\b.*$")


_ENCLITICS = {"lo", "la", "le", "los", "las", "les", "me", "te", "se", "nos", "os"}
_NOT_VERBS = {"y", "e", "ó", "que", "no", "como", "cuánto", "os", "ellos", "gentes"}
_GLUED_BEFORE_RE = re.compile(r"(\w*)(</w>)(<transChange[^>]*>)([^<]*)(?=</transChange>)")


def separate_rv1909_words(raw: str) -> str:
    """Put back the spaces RV1909's markup lacks between a word and an added word.

    The module often writes `<w>ejército</w><transChange>se llamaba</transChange><w>Sísara</w>`
    with no space at either boundary. A space goes in at both, except before an added enclitic
    pronoun that completes the verb in front of it ("díjo" + "le" = "díjole").

    >>> separate_rv1909_words('<w>díjo</w><transChange>le</transChange><w>Dios</w>')
    '<w>díjo</w><transChange>le</transChange> <w>Dios</w>'
    >>> separate_rv1909_words('<w>ejército</w><transChange>se llamaba</transChange>')
    '<w>ejército</w> <transChange>se llamaba</transChange>'
    """

    def space(match: re.Match) -> str:
        word, close, open_tag, added = match.groups()
        glued = added in _ENCLITICS and word and word[0].islower() and word not in _NOT_VERBS
        return word + close + ("" if glued else " ") + open_tag + added

    raw = _GLUED_BEFORE_RE.sub(space, raw)
    return raw.replace("</transChange><w", "</transChange> <w")


def strip_rv1909_extras(text: str, book: str, chapter: int, verse: int) -> str:
    """Remove the headings and subscriptions RV1909 writes as plain verse text.

    >>> strip_rv1909_extras("BETH ¿Con qué limpiará el joven su camino?", "Psalms", 119, 9)
    '¿Con qué limpiará el joven su camino?'
    >>> strip_rv1909_extras("Hermanos, la gracia sea con vuestro espíritu. Amén. Enviada de Roma á "
    ...                     "los Gálatas.", "Galatians", 6, 18)
    'Hermanos, la gracia sea con vuestro espíritu. Amén.'
    """
    if book == "Psalms" and chapter == 119 and verse % 8 == 1:
        text = _ACROSTIC_HEADING_RE.sub("", text)
    if BOOKS[book][1] == "NT":
        text = _SUBSCRIPTION_RE.sub(r"\1", text)
    return text


_WORD_RE = re.compile(r"\w+")
_MID_SENTENCE_WORD_RE = re.compile(r"(?<=[a-záéíóúñüâêîôû,;] )\w+")


def fix_drop_caps(texts: dict[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str]:
    """Re-case the capitalised first word that RV1909 prints at each chapter start.

    The module keeps the printed drop cap: "EN el principio", "Y ACONTECIÓ", "Salmo de David.
    JEHOVÁ es mi pastor". In verse 1 of every chapter (and at Psalm 119's eight-verse stanzas) the
    first all-capital word of two or more letters is re-cased: capitalised at a sentence start,
    otherwise in whichever form (lower case or capitalised) the rest of the corpus uses more often
    in mid-sentence, so "Y ACONTECIÓ" becomes "Y aconteció" and "Y JEHOVÁ" becomes "Y Jehová".
    """
    forms = Counter()
    for text in texts.values():
        forms.update(w for w in _MID_SENTENCE_WORD_RE.findall(text) if not w.isupper())
    fixed = dict(texts)
    for (book, chapter, verse), text in texts.items():
        if not (verse == 1 or (book == "Psalms" and chapter == 119 and verse % 8 == 1)):
            continue
        for match in _WORD_RE.finditer(text):
            word = match.group()
            if len(word) < 2 or not word.isupper():
                continue
            lower, capital = word.lower(), word.capitalize()
            before = text[: match.start()].rstrip(" ¡¿(")
            at_sentence_start = not before or before[-1] in ".:!?"
            if at_sentence_start or forms[capital] > forms[lower]:
                word = capital
            else:
                word = lower
            fixed[(book, chapter, verse)] = text[: match.start()] + word + text[match.end() :]
            break
    return fixed


# ---------------------------------------------------------------------------------------------
# mod2imp export -> verses

_HEADER_RE = re.compile(r"^\$\$\$(.+) (\d+):(\d+)$")


def parse_imp(lines: Iterable[str]) -> Iterator[tuple[str, int, int, str]]:
    """(SWORD book name, chapter, verse, raw OSIS) for every entry of a mod2imp export.

    Module, testament, book and chapter headings (`[ … ]` headers and verse 0) are skipped.
    """
    key: tuple[str, int, int] | None = None
    body: list[str] = []
    for line in lines:
        line = line.rstrip("\n")
        if line.startswith("$$$"):
            if key is not None:
                yield (*key, "\n".join(body))
            header = _HEADER_RE.match(line)
            key = None
            if header and int(header.group(3)) > 0:
                key = (header.group(1), int(header.group(2)), int(header.group(3)))
            body = []
        elif key is not None:
            body.append(line)
    if key is not None:
        yield (*key, "\n".join(body))


Key = tuple[str, int, int]  # (book, chapter, verse)


def read_module(imp_lines: Iterable[str], column: str) -> dict[Key, tuple[str, frozenset[str]]]:
    """Key -> (plain text, Strong's numbers) for one module's export; empty verses left out."""
    verses = {}
    for sword_book, chapter, verse, raw in parse_imp(imp_lines):
        book = _BOOK_BY_SWORD_NAME.get(sword_book)
        if book is None:
            if sword_book not in EXCLUDED_BOOKS:
                raise ValueError(f"unknown book {sword_book!r} in the {column} module")
            continue
        keep_titles = not (book == "Psalms" and chapter == 119)
        if column == "rv1909":
            raw = separate_rv1909_words(raw)
        text = osis_to_text(raw, keep_psalm_titles=keep_titles)
        if column == "rv1909":
            text = strip_rv1909_extras(text, book, chapter, verse)
        if text:
            verses[(book, chapter, verse)] = (text, strongs_numbers(raw))
    return verses


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def align_verses(
    reference: dict[Key, frozenset[str]],
    other: dict[Key, frozenset[str]],
    band: int = 8,
    same_key_min: float = 0.1,
    moved_min: float = 0.5,
    merged_min: float = 0.5,
    untagged: float = 0.3,
) -> dict[Key, Key]:
    """Map reference verse keys to the keys of `other` that hold the same verse.

    RV1909 is filed under KJV verse numbers, but where Spanish numbering differs (Jonah 1:17 is
    its 2:1, Job 39-40, Hosea 12, Numbers 13, ...) the module shifts whole chapters and merges
    verses. Both modules tag words with Strong's numbers, so each book is aligned by a monotone
    one-to-one matching that maximises the summed Jaccard similarity of the verses' Strong's
    sets minus a threshold: `same_key_min` for a verse under its own key, `moved_min` for one
    under another key at most `band` positions away. A verse untagged on either side counts as
    similarity `untagged` under its own key (enough to stay there) and never moves.
    Then merges are undone: when a reference verse is left unmatched and the verse matched to
    its neighbour holds at least `merged_min` of the unmatched verse's own Strong's numbers,
    that verse holds both and is dropped too (repeated until nothing changes). Reference verses
    without a match are left out.

    >>> kjv = {("Jonah", 1, 17): frozenset("ab"), ("Jonah", 2, 1): frozenset("cd")}
    >>> rv = {("Jonah", 2, 1): frozenset("ab"), ("Jonah", 2, 2): frozenset("cd")}
    >>> sorted(align_verses(kjv, rv).items())
    [(('Jonah', 1, 17), ('Jonah', 2, 1)), (('Jonah', 2, 1), ('Jonah', 2, 2))]
    """
    book_order = {book: i for i, book in enumerate(BOOKS)}
    mapping: dict[Key, Key] = {}
    books = sorted({key[0] for key in reference} & {key[0] for key in other}, key=book_order.get)
    for book in tqdm(books, desc="align", unit="book", disable=len(books) < 10):
        keys = sorted(
            {k for k in reference if k[0] == book} | {k for k in other if k[0] == book},
            key=lambda k: (book_order[k[0]], k[1], k[2]),
        )
        n, width = len(keys), 2 * band + 1
        # best[i][d]: best total gain matching reference keys[:i+1] with other keys[:j+1],
        # where j = i + d - band (a diagonal band around "same key").
        best = [[0.0] * width for _ in range(n)]  # (n, width)
        step = [[""] * width for _ in range(n)]  # (n, width)
        for i in range(n):
            for d in range(width):
                j = i + d - band
                if not 0 <= j < n:
                    continue
                options = [(0.0, "")]
                if i > 0 and d + 1 < width:
                    options.append((best[i - 1][d + 1], "skip reference"))
                if j > 0 and d > 0:
                    options.append((best[i][d - 1], "skip other"))
                a, b = reference.get(keys[i]), other.get(keys[j])
                if a is not None and b is not None:
                    if i == j:
                        gain = (_jaccard(a, b) if a and b else untagged) - same_key_min
                    else:
                        gain = _jaccard(a, b) - moved_min
                    if gain > 0:
                        options.append(
                            ((best[i - 1][d] if i > 0 and j > 0 else 0.0) + gain, "match")
                        )
                best[i][d], step[i][d] = max(options, key=lambda option: option[0])
        matched: dict[Key, Key] = {}
        i, d = n - 1, band
        while i >= 0 and 0 <= i + d - band and step[i][d]:
            if step[i][d] == "match":
                matched[keys[i]] = keys[i + d - band]
                i -= 1
            elif step[i][d] == "skip reference":
                i, d = i - 1, d + 1
            else:
                d -= 1
        in_reference = [key for key in keys if key in reference]
        merged = True
        while merged:  # dropping a merge can expose the next one
            merged = set()
            for position, key in enumerate(in_reference):
                if key in matched:
                    continue
                for neighbour in in_reference[max(0, position - 1) : position + 2]:
                    if neighbour in matched:
                        novel = reference[key] - reference[neighbour]
                        held = novel & other[matched[neighbour]]
                        if novel and len(held) >= merged_min * len(novel):
                            merged.add(neighbour)
            for key in merged:
                del matched[key]
        mapping.update(matched)
    return mapping


def check_modules() -> None:
    """Raise RuntimeError, naming the apt-get command, unless mod2imp and all modules exist."""
    if shutil.which("mod2imp") is None:
        raise RuntimeError(f"mod2imp (libsword-utils) is not installed; run: {INSTALL_COMMAND}")
    for module in MODULES.values():
        probe = subprocess.run(["mod2imp", module], capture_output=True, text=True)
        if probe.returncode != 0 or "$$$" not in probe.stdout[:2000]:
            raise RuntimeError(f"SWORD module {module} is not installed; run: {INSTALL_COMMAND}")


def export_module(module: str) -> list[str]:
    """mod2imp's raw export of one module, as lines."""
    result = subprocess.run(["mod2imp", module], capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def build_rows(verses_by_column: dict[str, dict[Key, str]]) -> list[dict]:
    """One row per verse that any translation has, in canonical order; "" where one lacks it."""
    book_order = {book: i for i, book in enumerate(BOOKS)}
    keys = sorted(
        {key for verses in verses_by_column.values() for key in verses},
        key=lambda key: (book_order[key[0]], key[1], key[2]),
    )
    rows = []
    for book, chapter, verse in keys:
        _, testament, section = BOOKS[book]
        row = {
            "book": book,
            "chapter": chapter,
            "verse": verse,
            "testament": testament,
            "section": section,
            "split": split_of(book),
        }
        for column in TRANSLATIONS:
            row[column] = verses_by_column.get(column, {}).get((book, chapter, verse), "")
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# TSV


def write_verses(rows: Iterable[dict], path: str | Path) -> None:
    """Write rows as TSV with a header line; verse text never holds tabs or newlines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([row[column] for column in COLUMNS])


# ---------------------------------------------------------------------------------------------
# Pairs


@dataclass(frozen=True)
class PairBounds:
    """Length filter for a translation pair, in characters (seed 004: 5-100 chars, ratio < 2)."""

    min_chars: int = 10  # each side at least this long: shorter ones are fragments ("Selah.")
    max_chars: int = 300  # each side at most this long: ~99th percentile, about 75 tokens
    max_ratio: float = 2.0  # longer side / shorter side must stay below this, as in 004


PAIR_BOUNDS = PairBounds()


def drop_reason(source: str, target: str, bounds: PairBounds = PAIR_BOUNDS) -> str | None:
    """Why a pair fails the filter ("empty", "too short", "too long", "ratio"), or None."""
    if not source or not target:
        return "empty"
    shorter, longer = sorted((len(source), len(target)))
    if shorter < bounds.min_chars:
        return "too short"
    if longer > bounds.max_chars:
        return "too long"
    if longer / shorter >= bounds.max_ratio:
        return "ratio"
    return None


def filter_pairs(
    rows: Iterable[dict],
    source: str,
    target: str,
    split: str | None = None,
    bounds: PairBounds = PAIR_BOUNDS,
) -> list[dict]:
    """Verse pairs (source column -> target column) that pass the length filter.

    Each pair is {"book", "chapter", "verse", "section", "split", "source", "target"}.
    `split` keeps only that split; the usual pairs are ("kjv", "web") and ("web", "rv1909").
    """
    for column in (source, target):
        if column not in TRANSLATIONS:
            raise ValueError(f"`source` and `target` must be in {TRANSLATIONS}, got {column!r}")
    if split is not None and split not in SPLITS:
        raise ValueError(f"`split` must be one of {SPLITS}, got {split!r}")
    pairs = []
    for row in rows:
        if split is not None and row["split"] != split:
            continue
        if drop_reason(row[source], row[target], bounds) is None:
            pairs.append(
                {
                    **{k: row[k] for k in ("book", "chapter", "verse", "section", "split")},
                    "source": row[source],
                    "target": row[target],
                }
            )
    return pairs


# ---------------------------------------------------------------------------------------------
# Fixture

# Passages copied into the fixture: every split and section, the deuterocanon, verses one
# translation lacks (Luke 17:36, Acts 8:37), and chapters RV1909 numbers differently (Jonah 1-2,
# Hosea 11-12, Job 39-40).
FIXTURE_PASSAGES = (
    "Genesis 1:1-31",
    "Exodus 20:1-17",
    "Job 39:26-40:8",
    "Psalms 23:1-6",
    "Psalms 119:1-10",
    "Proverbs 3:1-8",
    "Isaiah 53:1-6",
    "Daniel 7:9-14",
    "Matthew 5:3-12",
    "Matthew 17:20-22",
    "Luke 17:34-37",
    "Acts 8:36-38",
    "1 Corinthians 13:1-13",
    "2 Corinthians 13:11-14",
    "Revelation 21:1-6",
    "Tobit 1:1-3",
    "Sirach 1:1-4",
    "2 Esdras 13:1-3",
    "Judges 16:4-12",
    "Ecclesiastes 1:1-11",
    "Hosea 11:9-12:3",
    "Amos 5:21-24",
    "Mark 1:1-11",
    "James 1:2-8",
    "Leviticus 19:9-18",
    "Ruth 1:1-18",
    "Song of Solomon 2:1-7",
    "Jonah 1:15-2:10",
    "Micah 6:6-8",
    "John 1:1-14",
    "John 3:16-17",
    "Galatians 5:19-23",
)
_PASSAGE_RE = re.compile(r"^(.+) (\d+):(\d+)-(?:(\d+):)?(\d+)$")


def select_passages(rows: Iterable[dict], passages: Iterable[str]) -> list[dict]:
    """Rows inside any of the passages ("Job 39:26-40:8", "Genesis 1:1-31"), in table order."""
    spans = []
    for passage in passages:
        match = _PASSAGE_RE.match(passage)
        if match is None or match.group(1) not in BOOKS:
            raise ValueError(f"`passages` must look like 'Genesis 1:1-31', got {passage!r}")
        book, chapter, verse, last_chapter, last_verse = match.groups()
        first = (int(chapter), int(verse))
        spans.append((book, first, (int(last_chapter or chapter), int(last_verse))))
    return [
        row
        for row in rows
        if any(
            row["book"] == book and first <= (row["chapter"], row["verse"]) <= last
            for book, first, last in spans
        )
    ]


# ---------------------------------------------------------------------------------------------
# Build


def build(out: str | Path = DEFAULT_OUT) -> tuple[list[dict], Counter]:
    """Export the three modules, align them, write the verse table to `out`.

    Returns the rows and how the RV1909 verses were aligned ("same key", "moved", "dropped").
    WEB and KJV share their verse numbering and are joined by key.
    """
    check_modules()
    modules = {}
    for column, module in tqdm(MODULES.items(), desc="export + parse", unit="module"):
        modules[column] = read_module(export_module(module), column)
    texts = {
        column: {k: text for k, (text, _) in verses.items()} for column, verses in modules.items()
    }
    mapping = align_verses(
        {k: lemmas for k, (_, lemmas) in modules["kjv"].items()},
        {k: lemmas for k, (_, lemmas) in modules["rv1909"].items()},
    )
    rv1909 = fix_drop_caps(texts["rv1909"])
    texts["rv1909"] = {key: rv1909[rv_key] for key, rv_key in mapping.items()}
    alignment = Counter("same key" if key == rv_key else "moved" for key, rv_key in mapping.items())
    alignment["dropped"] = len(rv1909) - len(mapping)
    rows = build_rows(texts)
    write_verses(rows, out)
    return rows, alignment


def summarize(rows: list[dict]) -> str:
    """Counts of a verse table: per split, per section and split, and the pair filters."""
    lines = [f"{len(rows)} rows"]
    canonical = [row for row in rows if row["testament"] != "DC"]
    for column in TRANSLATIONS:
        have = [row for row in rows if row[column]]
        words = sum(len(row[column].split()) for row in have)
        lines.append(f"  {column}: {len(have)} verses, {words} words")
    split_counts = Counter(row["split"] for row in canonical)
    lines.append("canonical verses per split (share):")
    for split in SPLITS:
        n = split_counts[split]
        lines.append(f"  {split:<10} {n:>6} ({n / len(canonical):.1%})")
    lines.append("verses per section x split (canonical; deuterocanon in train, separately):")
    lines.append(f"  {'section':<16}" + "".join(f"{s:>11}" for s in (*SPLITS, "DC")))
    for section in SECTIONS:
        cells = [
            sum(row["section"] == section and row["split"] == split for row in canonical)
            for split in SPLITS
        ]
        cells.append(sum(row["section"] == section and row["testament"] == "DC" for row in rows))
        lines.append(f"  {section:<16}" + "".join(f"{n:>11}" for n in cells))
    for source, target in (("kjv", "web"), ("web", "rv1909")):
        lines.append(f"pairs {source}->{target} ({PAIR_BOUNDS}):")
        for split in SPLITS:
            reasons = Counter(
                drop_reason(row[source], row[target]) or "kept"
                for row in canonical
                if row["split"] == split
            )
            detail = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()) if k != "kept")
            lines.append(f"  {split:<10} kept {reasons['kept']:>6}; dropped: {detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.data", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the TSV")
    parser.add_argument(
        "--fixture", action="store_true", help=f"also rewrite the test fixture {FIXTURE}"
    )
    args = parser.parse_args(argv)
    try:
        rows, alignment = build(args.out)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    if args.fixture:
        fixture = select_passages(rows, FIXTURE_PASSAGES)
        write_verses(fixture, FIXTURE)
        print(f"wrote {FIXTURE} ({len(fixture)} verses)")
    print("RV1909 verses aligned to KJV keys by Strong's numbers:", dict(alignment))
    print(summarize(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
