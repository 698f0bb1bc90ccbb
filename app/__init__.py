"""The Gradio UI: one module per tab, thin callbacks, public API endpoints. No torch, no SQL."""
