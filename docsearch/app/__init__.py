"""Command line and web interfaces: `cli` (typer), `ui` (gradio)."""
