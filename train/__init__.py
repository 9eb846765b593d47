"""Training: the verse table (train.data), tokenizers (train.tokenizer), the training loop
(train.common), the recipes of `scriptorium train` (train.lm, train.seq2seq.recipes,
train.masked_lm; their contract: train.recipe) and their metrics (train.evaluate), word vectors
(train.word_vectors), the hierarchical model's data, recipes and shipping
(train.hierarchical.recipes, train.hierarchical.ship, train.hierarchical.cli) and the Spurgeon
corpus (train.spurgeon).

May import: export/ (to export and seal what it trains), modeling/ (our torch model definitions),
study/ (the studies a model card reports), runtime/ (to evaluate bundles as the app runs them),
and torch, transformers, tokenizers. Nothing below imports train/ (tests/test_layers.py checks).
"""
