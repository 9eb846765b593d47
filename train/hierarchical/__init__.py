"""Seed 003's hierarchical character-level model, trained: its data and recipes (`recipes`), the
command line (`cli`: lm, autoencoder, style, ship), shipping the WEB models (`ship`) and the
paraphraser trained on the library (`library_ship`). The model itself is modeling/hierarchical.py,
its export export/hierarchical.py, its runtime runtime/hierarchical.py.
"""
