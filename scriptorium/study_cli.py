"""`python -m scriptorium study masking|probes|generate|neighbours|analogies`: seed 000's and
001's studies on shipped bundles, printed as tables (and, for `masking`, written as JSON + PNG).

    scriptorium study masking [--models models/masked-lm-base models/masked-lm-large]
                              [--sentences 300 | --everyday] [--repetitions 3] [--out study-out]
                              [--wordnet /usr/share/wordnet]
    scriptorium study probes [--models …]
    scriptorium study generate --prompt TEXT [--right TEXT] [--tokens 12] [--lm models/bible-lm]
    scriptorium study neighbours [--models …] [--vectors models/word2vec/skipgram …]
    scriptorium study analogies [--vectors …] [--embeddings models/bible-lm …]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from study.content_words import WORDNET_DIR

MASKED = [Path("models/masked-lm-base"), Path("models/masked-lm-large")]
VECTORS = [Path("models/word2vec/skipgram"), Path("models/word2vec/cbow")]
EMBEDDINGS = [Path("models/bible-lm"), *MASKED]


def _load(paths):
    import runtime

    return {runtime.load(p).name: runtime.load(p) for p in paths}


def masking(args) -> int:
    """All masked words and, beside them, the content words among them (study/content_words.py,
    WordNet from --wordnet)."""
    import study.masking
    from export import corpus
    from study.content_words import ContentWords

    words = ContentWords.from_wordnet(args.wordnet)
    if args.everyday:  # unseen everyday English (study/everyday_sentences.txt), not verses
        from study.paraphrase_quality import everyday_sentences

        sentences = everyday_sentences()
    else:
        rows = corpus.load_verses(args.verses)
        sentences = study.masking.held_out_sentences(rows, args.sentences, args.seed)
    results = {
        name: study.masking.masking_study(
            gen, sentences, repetitions=args.repetitions, seed=args.seed, content_words=words
        )
        for name, gen in _load(args.models).items()
    }
    for name, result in results.items():
        content = result["content"]
        print(f"{name}: {result['sentences']} sentences × {result['repetitions']} repetitions")
        print(
            "  ratio  "
            + "  ".join(f"top{k:<3}" for k in result["top_k"])
            + "  predictions  |  content words: "
            + "  ".join(f"top{k:<3}" for k in result["top_k"])
            + "  predictions"
        )
        for i, ratio in enumerate(result["ratios"]):
            cells, content_cells = (
                "  ".join(f"{100 * part['accuracy'][str(k)][i]:5.1f}" for k in result["top_k"])
                for part in (result, content)
            )
            print(
                f"  {ratio:5.2f}  {cells}  {result['predictions'][i]:11}  |  "
                f"{'':15}{content_cells}  {content['predictions'][i]}"
            )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "masking.json").write_text(json.dumps(results, indent=2) + "\n")
        from study.figures import masking_plot

        masking_plot(results).savefig(args.out / "masking.png", dpi=100)
        print(f"wrote {args.out / 'masking.json'} and {args.out / 'masking.png'}")
    return 0


def probes(args) -> int:
    import study.probes

    for name, gen in _load(args.models).items():
        print(f"== {name}")
        for context, row in study.probes.analogy_table(gen).items():
            print(f"  {context}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()))
        order = study.probes.word_order(gen)
        print("  word order (queen): " + ", ".join(f"{k} {v:.3f}" for k, v in order.items()))
        for a, b in (
            ("the king was tired so he went to sleep", "the queen was tired so he went to sleep"),
            ("the king was tired so he went to sleep", "the king was tired so he went to sleep"),
        ):
            result = study.probes.influence(gen, a, b)
            print(
                f"  AIS {result['ais']:.3f}, average {result['average_similarity']:.3f}: "
                f"{a!r} / {b!r}"
            )
    return 0


def generate(args) -> int:
    import runtime
    import study.bert_generation

    for name, gen in _load(args.models).items():
        print(f"== {name}")
        for strategy, text in study.bert_generation.all_strategies(
            gen, args.prompt, args.right, args.tokens
        ).items():
            print(f"  {strategy}: {args.prompt}⟨{text}⟩{(' ' + args.right) if args.right else ''}")
    lm = runtime.load(args.lm)
    config = runtime.GenerationConfig(max_new_tokens=args.tokens, do_sample=False)
    text = lm.generate(args.prompt, config)[0].text
    print(f"== {lm.manifest.name} (causal, greedy): {args.prompt}⟨{text}⟩")
    return 0


def neighbours(args) -> int:
    import study.word_analogies

    vectors = _load(args.vectors)
    masked = _load(args.models)
    for word, sentences in study.word_analogies.POLYSEMOUS.items():
        print(f"== {word}")
        for name, wv in vectors.items():
            found = wv.most_similar(word, topn=8) if word in wv else []
            print(f"  {name} (static): " + ", ".join(w for w, _ in found))
        for name, gen in masked.items():
            for sentence in sentences:
                found = study.word_analogies.contextual_neighbours(gen, sentence, word)
                print(f"  {name} in {sentence!r}: " + ", ".join(w for w, _ in found))
    return 0


def analogies(args) -> int:
    import runtime
    import study.word_analogies
    from runtime.word_vectors import load_matrix

    models = dict(_load(args.vectors))
    for path in args.embeddings:
        gen = runtime.load(path)
        matrix = load_matrix(gen.directory, gen.manifest)
        name = f"{gen.manifest.name} input embeddings"
        models[name] = study.word_analogies.from_embeddings(matrix, gen.tokenizer, name)
    for name, wv in models.items():
        result = study.word_analogies.evaluate(wv)
        sections = ", ".join(
            f"{s} {100 * (v['accuracy'] or 0):.0f} %" for s, v in result["sections"].items()
        )
        print(
            f"{name}: analogies {100 * result['analogy_accuracy']:.1f} % of "
            f"{result['analogy_questions']}/{result['analogy_total']} ({sections}); similarity "
            f"{100 * result['similarity_accuracy']:.0f} % of {result['similarity_triples']}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scriptorium study", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for name, function in (
        ("masking", masking),
        ("probes", probes),
        ("generate", generate),
        ("neighbours", neighbours),
        ("analogies", analogies),
    ):
        commands[name] = sub.add_parser(name)
        commands[name].set_defaults(function=function)
        commands[name].add_argument("--models", type=Path, nargs="+", default=MASKED)
    commands["masking"].add_argument("--verses", type=Path, default=Path("data/verses.tsv"))
    commands["masking"].add_argument("--sentences", type=int, default=300)
    commands["masking"].add_argument(
        "--everyday",
        action="store_true",
        help="study/everyday_sentences.txt's 60 everyday sentences instead of held-out verses",
    )
    commands["masking"].add_argument("--repetitions", type=int, default=3)
    commands["masking"].add_argument("--seed", type=int, default=0)
    commands["masking"].add_argument("--out", type=Path)
    commands["masking"].add_argument(
        "--wordnet", type=Path, default=WORDNET_DIR, help="WordNet dict folder (content words)"
    )
    commands["generate"].add_argument("--prompt", required=True)
    commands["generate"].add_argument("--right", default="")
    commands["generate"].add_argument("--tokens", type=int, default=12)
    commands["generate"].add_argument("--lm", type=Path, default=Path("models/bible-lm"))
    for name in ("neighbours", "analogies"):
        commands[name].add_argument("--vectors", type=Path, nargs="+", default=VECTORS)
    commands["analogies"].add_argument("--embeddings", type=Path, nargs="+", default=EMBEDDINGS)
    args = parser.parse_args(argv)
    return args.function(args)


if __name__ == "__main__":
    sys.exit(main())
