"""Judge models (RLAIF): the prompt and parsing, an endpoint, their agreement and win rates."""
