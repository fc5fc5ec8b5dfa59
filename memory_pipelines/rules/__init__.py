"""The deterministic offline back end's heuristics (the `rules` back end).

Lexical and language-aware, documented in the README: it never calls anything and gives
the same answer for the same input, so the pipeline runs offline and tests are exact.
"""
