"""The embedded demo (movie-review sentiment): corpus, lexicon oracle, tiny tokenizer and SFT policy."""
