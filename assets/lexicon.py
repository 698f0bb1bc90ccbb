"""The demo's oracle: a movie-review sentiment lexicon and its score (positive words minus negative words).

The synthetic annotator prefers the sample with the higher score, and benchmarks report the mean score of a
policy's samples: PPO against a reward model learned from these preferences should raise it.

    >>> sentiment_score("The acting was brilliant, but the plot was boring and dull.")
    -1.0
"""

from __future__ import annotations

import re

POSITIVE = frozenset({
    "brilliant", "moving", "wonderful", "excellent", "great", "superb", "beautiful", "charming", "delightful",
    "fantastic", "funny", "gripping", "hilarious", "inspiring", "lovely", "magnificent", "memorable", "outstanding",
    "perfect", "powerful", "remarkable", "clever", "stunning", "touching", "terrific", "thrilling", "witty",
    "engaging", "heartfelt", "impressive", "enjoyable", "amazing", "gorgeous", "captivating", "masterpiece",
    "loved", "enjoyed", "recommend", "fun", "best",
})

NEGATIVE = frozenset({
    "awful", "boring", "terrible", "dull", "bad", "poor", "weak", "horrible", "dreadful", "tedious", "bland",
    "clumsy", "confusing", "disappointing", "forgettable", "lifeless", "mediocre", "messy", "painful", "pointless",
    "predictable", "shallow", "silly", "sloppy", "stupid", "tiresome", "ugly", "unfunny", "annoying", "flat",
    "lazy", "awkward", "cheap", "hollow", "wooden", "pretentious", "hated", "waste", "mess", "worst",
})

_WORD = re.compile(r"[a-z]+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (runs of letters); punctuation and digits separate words."""
    return _WORD.findall(text.lower())


def sentiment_score(text: str) -> float:
    """Number of positive lexicon words minus number of negative ones, counting repeats."""
    tokens = words(text)
    return float(sum(t in POSITIVE for t in tokens) - sum(t in NEGATIVE for t in tokens))
