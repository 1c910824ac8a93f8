"""Corpora: BEIR folders, LoCoV1 files, the needle probe, and the bundled sample corpus."""
