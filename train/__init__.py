"""Training recipes: the data (train.data), tokenizers (train.tokenizer) and model recipes."""
