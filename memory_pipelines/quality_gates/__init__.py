"""Data-quality gates: the check catalogue (what each stage's rows must satisfy) and the
great-expectations runner that validates them."""
