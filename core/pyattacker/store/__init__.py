"""Stores: the store contract, opening a store by location, codecs, artifact backends, the
writer lock and the recorder (group commits).

Layer 3: imports plugins and the vocabulary.
"""
