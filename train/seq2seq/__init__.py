"""The encoder-decoders, trained: the transformer rewriter and translator (`bart`: input format,
length tokens, batches and the mBART architecture; `recipes`: their recipes and evaluation) and
seed 001's GRU encoder-decoders (`gru`: the recipe and shipping; `gru_eval`: the evaluation
against the mBART rewriter; `gru_card`: their model cards). The GRU models themselves are
modeling/gru_seq2seq.py, their export export/gru_seq2seq.py, their runtime runtime/recurrent.py.
"""
