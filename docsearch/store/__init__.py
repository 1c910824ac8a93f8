"""The collection store: every collection's LanceDB tables, and the only door to Lance.

A database (`database.Database`: a folder or an object-store prefix) holds collections; each
collection has the tables `<name>__chunks`, `__docs` and `__files` per version (`tables.py`),
its identity (encoder, chunker) in the chunks table's schema metadata (`schema.py`), and a
version pointer when it has switched encoders (`versions.py`: one state, one pure transition).
A collection version is read through `reads.Store` (what a Retriever holds: searches, rows,
file records) and written through `writes.Writer` (what an indexing run holds: commits,
fragments, indexes; `checkpoint.py` its vector checkpoint, `indexes.py` its indexes).
`documents.py` makes a document's row from its chunks; `pending.py` hides half-written files
from searches; `exact.py` runs nearest searches in memory on tables without an ANN index.
Nothing outside this package imports `lance` or `lancedb` (a test scans the AST).
Not here: walking folders, extraction, embedding (`docsearch.indexer`), fusion (`docsearch.fusion`).
"""
