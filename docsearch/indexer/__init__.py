"""Indexing: extract files to text, chunk, embed, store in LanceDB."""
