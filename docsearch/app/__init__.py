"""Command line and web interfaces: `cli` (the typer app; one `*_cmd` module per command or
group, what they share in `common`) and `web` (the gradio UI)."""
