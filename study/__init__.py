"""Seed 000's masked-LM studies and seed 001's word-vector evaluations, torch-free.

- `study.masking`: prediction accuracy against the masking ratio (000, figures 16-17), on all
  masked words and on content words;
- `study.content_words`: nouns, verbs and adjectives by WordNet's index files, offline (issue 24);
- `study.probes`: king / queen / man / woman cosines with and without context, word order, and
  the Average Influence Similarity (000, section 4.2);
- `study.bert_generation`: generating from a masked LM three ways (000, section 4.3);
- `study.word_analogies`: the analogy and similarity set, static against contextual neighbours
  (001);

Everything runs on bundles through the runtime (numpy + onnxruntime), so the app can run the
same code live. Their command line, `scriptorium study …`, is `scriptorium/study_cli.py`: it
reads the verse table through export.corpus, which study/ itself may not import.

Layer: study/ may import runtime (and matplotlib in `study.figures`, for cards and the CLI);
never torch or transformers. ui/ and train/ import it (docs/DESIGN.md, "Layers").
"""
