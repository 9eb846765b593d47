"""Content words (nouns, verbs, adjectives) without a part-of-speech tagger, for the masking
study's content-word accuracy (issue 24).

A word is a content word when WordNet 3.0 lists it as a noun, verb or adjective, directly or
through WordNet's own base-form rules ("morphy", morphy(7WN): first the exception lists
noun.exc / verb.exc / adj.exc, so *went* → *go*, *men* → *man*, *better* → *good*; then the
rules of detachment, so *loves* → *love*, *cities* → *city*, *walked* → *walk*, *greater* →
*great*), AND it is not in FUNCTION_WORDS, a fixed list of closed-class words. The list is
needed because WordNet also files many function words under those parts of speech (*i* and *he*
as chemical elements, *in* as the inch, *will*, *can*, *may* and *might* as nouns and verbs,
*one* as a noun and an adjective, *now* and *then* as nouns). Its classes are the closed classes
of the Penn Treebank tag set (Santorini 1990, "Part-of-speech tagging guidelines for the Penn
Treebank Project"): coordinating conjunctions (CC), cardinal numbers (CD), determiners and
predeterminers (DT, PDT), existential *there* (EX), prepositions and subordinating conjunctions
(IN, TO), modals (MD), personal, possessive and wh-pronouns (PRP, PRP$, WP, WP$, WDT), wh-adverbs
(WRB), interjections (UH); plus every form of the auxiliaries *be*, *have* and *do*, the
indefinite pronouns (*nothing*, *someone*, …), the archaic pronoun and verb forms of Bible
English (*thou*, *thee*, *ye*, *hath*, *shalt*, …), and a few adverbs that WordNet also files as
nouns or adjectives but that are adverbs in nearly every use (*now*, *then*, *here*, *so*,
*very*, *only*, *just*, *even*, *still*, *again*).

How this approximates a tagger, and its known errors: the decision is per word type, not per
use in context. A word with a noun or verb sense counts in every use (*love* as noun or verb
both count, which is what "content word" means here). Words in FUNCTION_WORDS never count,
even where a sentence uses them as content (*do* as a main verb, *will* as a noun, *still* in
*be still*). Adverbs count where WordNet also knows the word as a noun, verb or adjective
(*well*, *back*, *far*, *away*), since WordNet's index cannot tell the uses apart. Proper
nouns count when WordNet has them (*God*, *Jesus*, *David*, *Israel*, *Yahweh*), and not
otherwise (*Jehoshaphat*); words are looked up lower-cased.

WordNet comes from Debian's `wordnet-base` package (/usr/share/wordnet: the `index.noun`,
`index.verb`, `index.adj` files — one lemma per line, first field, license header lines
indented by two spaces — and the `*.exc` exception lists — an inflected form and its base
forms per line). `tests/fixtures/wordnet/` holds a few lines of each for tests and the
recipes' `--tiny` runs, so neither needs the package.

Does not cover: which words the study masks (study/masking.py).
"""

from __future__ import annotations

from pathlib import Path

WORDNET_DIR = Path("/usr/share/wordnet")
FIXTURE_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "wordnet"
PARTS = ("noun", "verb", "adj")

# morphy(7WN), "Rules of Detachment": (suffix, ending) per part of speech, tried in this order.
DETACHMENT = {
    "noun": (
        ("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
        ("men", "man"), ("ies", "y"),
    ),
    "verb": (
        ("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"),
        ("ing", ""),
    ),
    "adj": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
}  # fmt: skip

# Closed-class words (see the module docstring for the classes and their source).
FUNCTION_WORDS = frozenset(
    # personal, possessive, reflexive, wh- and indefinite pronouns (PRP, PRP$, WP, WP$, WDT)
    "i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his "
    "himself she her hers herself it its itself they them their theirs themselves who whom whose "
    "which what whoever whomever whatever whichever anyone anybody anything everyone everybody "
    "everything someone somebody something nobody nothing none "
    # archaic pronouns and auxiliary forms of Bible English
    "thou thee thy thine thyself ye hath hast doth dost art wast wert shalt wilt canst couldst "
    "wouldst shouldst mayest mightest "
    # determiners, predeterminers and quantifiers (DT, PDT)
    "a an the this that these those all any both each either every few many much more most "
    "neither no several some such other another enough half less least "
    # prepositions, subordinating conjunctions and "to" (IN, TO)
    "about above across after against along amid among amongst around as at before behind below "
    "beneath beside besides between beyond by concerning despite down during except for from in "
    "inside into like near of off on onto out outside over past per since through throughout "
    "till to toward towards under underneath unlike until unto up upon via with within without "
    "because although though unless whether while whereas than lest if "
    # coordinating conjunctions (CC)
    "and or but nor yet "
    # auxiliaries (every form of be, have, do) and modals (MD)
    "be am is are was were been being have has had having do does did done doing "
    "shall should will would can could may might must ought "
    # cardinal numbers (CD)
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred hundreds thousand thousands million millions "
    # existential there, wh-adverbs (EX, WRB) and adverbs WordNet also files as nouns/adjectives
    "there here where when why how whence whither thence hence then now so not very only just "
    "even still again "
    # interjections (UH)
    "oh o ah alas yes amen".split()
)


class ContentWords:
    """`is_content(word)`: a noun, verb or adjective to WordNet (after morphy) and not a
    function word. `lemmas` maps each part of speech to its WordNet lemmas; `exceptions` maps
    each part of speech to {inflected form: base forms}."""

    def __init__(self, lemmas: dict[str, set[str]], exceptions: dict[str, dict[str, list[str]]]):
        self.lemmas = lemmas
        self.exceptions = exceptions

    @classmethod
    def from_wordnet(cls, directory: Path = WORDNET_DIR) -> ContentWords:
        """Read `index.{noun,verb,adj}` and `{noun,verb,adj}.exc` from a WordNet dict folder."""
        directory = Path(directory)
        missing = [
            name
            for part in PARTS
            for name in (f"index.{part}", f"{part}.exc")
            if not (directory / name).is_file()
        ]
        if missing:
            raise FileNotFoundError(
                f"{directory} has no {', '.join(missing)}: install Debian's WordNet "
                "(`apt-get install wordnet-base`) or pass another WordNet dict folder"
            )
        lemmas, exceptions = {}, {}
        for part in PARTS:
            lines = (directory / f"index.{part}").read_text(encoding="utf-8").splitlines()
            lemmas[part] = {line.split(" ", 1)[0] for line in lines if line[:1] not in ("", " ")}
            table = {}
            for line in (directory / f"{part}.exc").read_text(encoding="utf-8").splitlines():
                fields = line.split()
                if len(fields) >= 2:
                    table[fields[0]] = fields[1:]
            exceptions[part] = table
        return cls(lemmas, exceptions)

    def base_forms(self, word: str, part: str) -> list[str]:
        """WordNet lemmas of part of speech `part` that `word` (lower-cased) is a form of: the
        word itself, its exception-list base forms, then the detachment rules' results."""
        if part not in PARTS:
            raise ValueError(f"`part` must be one of {', '.join(PARTS)}, got {part!r}")
        word = word.lower()
        candidates = [word, *self.exceptions[part].get(word, [])]
        candidates += [
            word[: -len(suffix)] + ending
            for suffix, ending in DETACHMENT[part]
            if word.endswith(suffix) and len(word) > len(suffix)
        ]
        found = []
        for candidate in candidates:
            if candidate in self.lemmas[part] and candidate not in found:
                found.append(candidate)
        return found

    def parts_of_speech(self, word: str) -> list[str]:
        """The parts of speech among noun, verb, adj under which WordNet knows `word`."""
        return [part for part in PARTS if self.base_forms(word, part)]

    def is_content(self, word: str) -> bool:
        """True for a noun, verb or adjective that is not a function word (module docstring)."""
        word = word.strip().lower()
        if not word or word in FUNCTION_WORDS:
            return False
        return bool(self.parts_of_speech(word))

    __call__ = is_content
