"""Containers: the named ones in the data path (store, named), what a start's target is, the
start in enroot's phases, its options, export and exec. Above ``hooks/`` and ``runtime/``."""
