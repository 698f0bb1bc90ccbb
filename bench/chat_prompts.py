"""A chat task for benches on a real model: deterministic prompts (questions and instructions built from templates and
topics, as conversations) and a deterministic rule as the oracle.

The rule, `concise_score`, is what many teams ask of a chat model: answer in about `TARGET_WORDS` words, without
markdown lists or headings. A response scores -|log2(words / TARGET_WORDS)| (0 at the target, -1 at half or double),
minus 0.5 if it uses markdown structure. SmolLM2-135M-Instruct's answers to these prompts run from a few words to
a few hundred, so the rule leaves room to learn and cannot be met by ending at once.

    train, heldout = chat_prompts()            # 240 and 48 conversations, the same on every machine
    python app.py loop ... --config '{"oracle": "bench.chat_prompts:concise_score", ...}'
"""

from __future__ import annotations

import math
import random
import re

TARGET_WORDS = 30
TEMPLATES = (
    "Explain {topic} in simple terms.",
    "What is {topic}?",
    "Why does {topic} matter?",
    "Give me one practical tip about {topic}.",
    "How would you describe {topic} to a child?",
    "What is a common misconception about {topic}?",
)
TOPICS = (
    "photosynthesis", "the water cycle", "compound interest", "gravity", "recycling", "sleep", "exercise",
    "the moon", "volcanoes", "vaccines", "the internet", "electric cars", "bees", "rainbows", "democracy",
    "friendship", "time management", "learning a language", "cooking pasta", "saving money", "the ocean",
    "climate", "music practice", "public speaking", "reading books", "drinking water", "the sun", "dinosaurs",
    "bicycles", "gardening", "coffee", "chess", "mountains", "libraries", "honesty", "teamwork", "maps", "clouds",
    "batteries", "earthquakes", "birds", "bread", "trees", "rivers", "stars", "memory", "habits", "kindness",
)
MARKDOWN = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|#+\s)", re.MULTILINE)


def chat_prompts(seed: int = 0, heldout: int = 48) -> tuple[list[list[dict]], list[list[dict]]]:
    """(training, held-out) prompts as one-turn conversations: every template with every topic, shuffled by `seed`."""
    texts = [template.format(topic=topic) for topic in TOPICS for template in TEMPLATES]
    random.Random(seed).shuffle(texts)
    conversations = [[{"role": "user", "content": text}] for text in texts]
    return conversations[heldout:], conversations[:heldout]


def concise_score(text: str) -> float:
    """About `TARGET_WORDS` words and no markdown lists or headings score best (0); see the module docstring."""
    words = max(1, len(text.split()))
    return -abs(math.log2(words / TARGET_WORDS)) - (0.5 if MARKDOWN.search(text) else 0.0)
