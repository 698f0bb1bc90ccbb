"""The embedded demo (movie-review sentiment): corpus, lexicon oracle, tiny tokenizer and SFT policy."""

from pathlib import Path

DEMO_POLICY_DIR = Path(__file__).resolve().parent / "demo_policy"  # the shipped SFT policy (no torch to find it)
