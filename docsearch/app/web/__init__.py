"""The search UI in the browser: `ui` (gradio layout and events), `actions` (what the UI does,
without gradio), `files` (the guarded document server). Imported only by `docsearch ui`.
"""
