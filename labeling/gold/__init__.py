"""Gold items: their rules (import, mark, flags) and gold rankings from a file."""
