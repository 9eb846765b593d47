"""The library recipe (train/library.py) on the committed fixture: each source in its own raw
format (tests/fixtures/library/), parsed, cleaned, held out and deduplicated."""

from __future__ import annotations

import json

import pytest

from train import data, library


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("library") / "library.jsonl"
    result = library.build(out, library.Inputs.fixture(), progress=False)
    return result, library.load_library(out)


def sentences_of(records, source):
    return [s for r in records if r["source"] == source for s in r["sentences"]]


def test_every_source_parses_into_paragraphs(built):
    result, records = built
    stats = result["stats"]
    assert list(stats) == list(library.SOURCES)
    for source, st in stats.items():
        assert st.paragraphs > 0 and st.sentences >= st.paragraphs, source
        assert st.paragraphs == sum(r["source"] == source for r in records)
        assert st.words == sum(len(s.split()) for s in sentences_of(records, source))
    assert set(records[0]) == {"source", "ref", "sentences"}


def test_dictionary_entries_lose_headword_pronunciation_etymology_and_citations(built):
    _, records = built
    gcide = sentences_of(records, "gcide")
    assert "To cast or drive out; to banish; to expel; to reject." in gcide
    assert "Hope was overthrown, yet could not be abandoned." in gcide  # quotation, "--I. Taylor."
    assert not any("Webster" in s or "--" in s or "\\" in s or "[" in s for s in gcide)
    devil = {r["ref"]: r["sentences"] for r in records if r["source"] == "devil"}
    assert devil["Abdication"] == [
        "An act whereby a sovereign attests his sense of the high temperature of the throne."
    ]
    assert "Abracadabra" not in devil  # an entry that is all verse
    wordnet = sentences_of(records, "wordnet")
    assert "Draw air into, and expel out of, the lungs." in wordnet
    assert "I can breathe better when the air is clean." in wordnet  # an example, capitalised


def test_commentaries_are_plain_sentences(built):
    _, records = built
    text = " ".join(sentences_of(records, "mhcc") + sentences_of(records, "tdavid"))
    assert "Oh, the power of the word of God!" in text
    assert "<" not in text and ">" not in text and "“" not in text and "’" not in text
    tdavid = sentences_of(records, "tdavid")
    assert not any(s.startswith(("Verse ", "EXPOSITION")) for s in tdavid)
    # sections other than EXPOSITION are kept (TITLE's text here)
    assert any("THE PREFACE PSALM" in s for s in tdavid)


def test_held_out_books_and_psalms_stay_out(built):
    result, records = built
    assert result["held_out_psalms"] == list(range(61, 78))
    refs = [r["ref"] for r in records if r["source"] in library.SWORD_MODULES]
    books = {ref.rsplit(" ", 1)[0] for ref in refs}
    assert "Genesis" in books and "Psalms" in books
    assert not books & set(data.HELD_OUT)  # Judges (MHCC) and Mark (Scofield) were in the input
    assert not any(ref.startswith("Psalms 62:") for ref in refs)
    stats = result["stats"]
    assert stats["mhcc"].dropped["held-out book or psalm entry"] == 6  # Judges 1, Psalms 62
    assert stats["scofield"].dropped["held-out book or psalm entry"] == 3  # Mark 1
    assert stats["tdavid"].dropped["held-out book or psalm entry"] == 1  # Psalm 62
    bible_refs = {r["ref"].rsplit(" ", 1)[0] for r in records if r["source"] in ("web", "kjv")}
    assert bible_refs and not bible_refs & set(data.HELD_OUT)


def test_leak_guard_drops_sentences_inside_held_out_verses():
    guard = library.LeakGuard(
        ["In the beginning was the Word, and the Word was with God, and the Word was God."]
    )
    assert guard.reason("And the Word was with God.", whole_verses=False)
    assert guard.reason("The Word was with God, and the Word was God!", whole_verses=False)
    assert guard.reason("The word was not with them.", whole_verses=False) is None
    quoting = "John wrote: in the beginning was the Word, and the Word was with God, and the Word "
    quoting += "was God."
    assert guard.reason(quoting, whole_verses=False) is None
    assert guard.reason(quoting, whole_verses=True) == "quotes a whole held-out verse"


def test_leak_guard_counts_what_it_removed(tmp_path):
    rows = data.load_verses(data.FIXTURE)
    held_out = next(r for r in rows if r["split"] != "train" and len(r["web"].split()) > 8)
    imp = tmp_path / "scofield.imp"
    imp.write_text(
        "$$$Genesis 1:1\n"
        f'<div sID="a" type="x-p"/> {held_out["web"]} The rest is a note of our own making.'
        ' <div eID="a" type="x-p"/>\n'
    )
    inputs = library.Inputs.fixture()
    inputs.sword = {**inputs.sword, "scofield": imp}
    result = library.build(tmp_path / "l.jsonl", inputs, ["scofield"], progress=False)
    dropped = result["stats"]["scofield"].dropped
    assert dropped["occurs in a held-out verse"] + dropped["quotes a whole held-out verse"] >= 1
    kept = sentences_of(library.load_library(tmp_path / "l.jsonl"), "scofield")
    assert kept == ["The rest is a note of our own making."]


def test_repeated_entries_paragraphs_and_sentences_are_kept_once(tmp_path):
    good = "The Lord is good to all who wait for him."
    entry = f'<div sID="a" type="x-p"/> {good} <div eID="a" type="x-p"/>'
    moved = f'<div sID="b" type="x-p"/> {good} <div eID="b" type="x-p"/>'
    rest = "He gives rest to the weary."
    longer = f'<div sID="c" type="x-p"/> {good} {rest} <div eID="c" type="x-p"/>'
    imp = tmp_path / "mhcc.imp"
    imp.write_text(
        f"$$$Genesis 3:1\n{entry}\n$$$Genesis 3:2\n{entry}\n"  # MHCC's repeat, byte for byte
        f"$$$Genesis 3:3\n{moved}\n"  # the same paragraph under other milestones
        f"$$$Genesis 4:1\n{longer}\n"  # a new paragraph that repeats a sentence
    )
    inputs = library.Inputs.fixture()
    inputs.sword = {**inputs.sword, "mhcc": imp}
    result = library.build(tmp_path / "l.jsonl", inputs, ["mhcc"], progress=False)
    dropped = result["stats"]["mhcc"].dropped
    assert (dropped["repeated entry"], dropped["repeated paragraph"], dropped["duplicate"]) == (
        1,
        1,
        1,
    )
    records = library.load_library(tmp_path / "l.jsonl")
    assert [r["sentences"] for r in records] == [[good], [rest]]


def test_duplicates_across_sources_are_counted(built):
    result, records = built
    everything = [" ".join(library.words_of(s)) for r in records for s in r["sentences"]]
    assert len(everything) == len(set(everything))
    assert sum(st.dropped["duplicate"] for st in result["stats"].values()) > 0


NOT_ENGLISH = "not English (no function word, few known words)"


@pytest.mark.parametrize(
    ("sentence", "reason"),
    [
        ("He went up to the mountain to pray.", None),
        ("Abandon, v. t.", "short"),
        ("and he went up to the mountain", "no capital start or end punctuation"),
        ("Non nobis, Domine, sed nomini tuo da gloriam.", NOT_ENGLISH),
        ("God created heavens, earth, light, darkness.", None),  # no function word: known words
        ("The word λόγος is Greek for the word.", "non-English characters"),
        ("See the verses in 1:2, 3:4, 5:6, 7:8, 9:10, 11:12, 13:14.", "numbers and symbols"),
    ],
)
def test_fragment_reasons(sentence, reason):
    lexicon = library.bible_lexicon(data.load_verses(data.FIXTURE))
    assert library.fragment_reason(sentence, lexicon) == reason


def test_without_a_lexicon_a_sentence_needs_a_function_word():
    sentence = "God created heavens, earth, light, darkness."
    assert library.fragment_reason(sentence) == NOT_ENGLISH


def test_normalize_and_split():
    assert library.normalize("“Come,” he said -- and  went ( ; ).") == '"Come," he said—and went.'
    assert library.split_sentences("See Ps. 23. It is J. Smith's house! Yes, it is.") == [
        "See Ps. 23.",
        "It is J. Smith's house!",
        "Yes, it is.",
    ]


def test_summary_names_every_source_and_licence(built):
    result, _ = built
    summary = library.summarize(result)
    for source, (_, licence) in library.SOURCES.items():
        assert f"| {source} |" in summary and licence in summary
    total = sum(st.words for st in result["stats"].values())
    assert f"**{total:,}**" in summary


def test_written_lines_are_json_records(built, tmp_path):
    out = tmp_path / "l.jsonl"
    library.build(out, library.Inputs.fixture(), ["devil"], progress=False)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line)["source"] == "devil" for line in lines) and lines


def test_recipes_read_the_library(built, tmp_path):
    """The recipes' readers: word2vec's sentences, the masked LM's packed groups and the
    hierarchical model's consecutive-sentence pairs, all from the built fixture library."""
    from runtime import hierarchical_text
    from train import masked_lm, word_vectors
    from train.hierarchical import recipes as hierarchical

    result, records = built
    path = tmp_path / "library.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    total = sum(st.sentences for st in result["stats"].values())

    sentences = word_vectors.library_sentences(path)
    assert len(sentences) == total and sentences[0] == word_vectors.words(
        records[0]["sentences"][0]
    )

    groups = masked_lm.library_chapters(path)
    assert sum(len(g.verses) for g in groups) == total
    assert [s for g in groups for s in g.verses] == [s for r in records for s in r["sentences"]]
    assert {g.book for g in groups} == set(library.SOURCES)  # each group is one source's
    assert len(groups) < len(records)  # short paragraphs (WordNet synsets) are grouped

    charset = hierarchical_text.default_charset(r["web"] for r in data.load_verses(data.FIXTURE))
    pairs, fitting = hierarchical.library_pairs(records, charset)
    assert 0 < len(pairs) < len(fitting) <= total
    paragraph_pairs = {(a, b) for r in records for a, b in zip(r["sentences"], r["sentences"][1:])}
    assert all(("".join(a).strip(), "".join(b).strip()) in paragraph_pairs for a, b in pairs)
    assert all(len(w) <= hierarchical_text.MAX_WORDS for w in fitting)
