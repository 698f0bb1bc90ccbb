"""The studio's UI side: the Gradio UI (one module per tab: a layout, handlers at module level, named outputs), the
charts, the public API endpoints, and the command line (`commands/`). No torch, no transformers, no SQL."""
