"""The demo's prompts and its SFT corpus: short lower-case movie-review sentences built from templates.

Every corpus sentence starts with one of the demo prompts ("the movie was", "i thought the acting", ...), so the
SFT policy learns to continue them. Adjectives are positive, negative or neutral with probabilities 0.4 / 0.4 / 0.2
and "and" / "but" clauses mostly keep / flip the polarity, so the policy's samples have mixed sentiment with a
mean lexicon score near zero: preference learning and PPO have room to raise it.

    >>> for sentence in build_corpus(2, seed=0):
    ...     print(sentence)
    my friends said the cinematography seemed delightful , and the story was very memorable .
    honestly , the ending was so bad and truly wooden .
"""

from __future__ import annotations

import random

SUBJECTS = (
    "the movie", "the film", "the acting", "the plot", "the ending", "the soundtrack", "the script", "the cast",
    "the story", "the dialogue", "the cinematography", "the lead actor",
)

# (template, needs_verb): openings that end with the subject need a verb before the adjective.
FRAMES = (
    ("{s} was", False), ("{s} felt", False), ("{s} is", False), ("i found {s}", False),
    ("i thought {s}", True), ("honestly , {s}", True), ("overall , {s}", True), ("in my opinion {s}", True),
    ("my friends said {s}", True), ("to be honest {s}", True),
)

POSITIVE_ADJECTIVES = (
    "brilliant", "moving", "wonderful", "excellent", "great", "superb", "beautiful", "charming", "delightful",
    "fantastic", "funny", "gripping", "hilarious", "inspiring", "lovely", "memorable", "outstanding", "powerful",
    "clever", "stunning", "touching", "thrilling", "witty", "engaging", "impressive", "enjoyable",
)
NEGATIVE_ADJECTIVES = (
    "awful", "boring", "terrible", "dull", "bad", "poor", "weak", "horrible", "tedious", "bland", "clumsy",
    "confusing", "disappointing", "forgettable", "lifeless", "mediocre", "messy", "painful", "pointless",
    "predictable", "shallow", "silly", "sloppy", "stupid", "flat", "wooden",
)
NEUTRAL_ADJECTIVES = (
    "long", "short", "slow", "quiet", "loud", "simple", "dark", "strange", "different", "familiar", "unusual",
    "serious", "old", "modern",
)
INTENSIFIERS = ("", "", "", "really ", "very ", "quite ", "a bit ", "rather ", "so ", "truly ")
VERBS = ("was", "was", "felt", "seemed", "is")
POSITIVE_ENDINGS = (", a real masterpiece .", "and i loved it .", "and i enjoyed it .", ", i would recommend it .",
                    ", so much fun .", ", one of the best this year .")
NEGATIVE_ENDINGS = (", a total mess .", "and i hated it .", ", a waste of time .", ", one of the worst this year .",
                    ", do not bother .")
NEUTRAL_ENDINGS = (", as expected .", "for a sunday night .", ", like the book .", "for its length .")

POLARITIES = ("positive", "negative", "neutral")
_ADJECTIVES = {"positive": POSITIVE_ADJECTIVES, "negative": NEGATIVE_ADJECTIVES, "neutral": NEUTRAL_ADJECTIVES}
_ENDINGS = {"positive": POSITIVE_ENDINGS, "negative": NEGATIVE_ENDINGS, "neutral": NEUTRAL_ENDINGS}
_OPPOSITE = {"positive": "negative", "negative": "positive", "neutral": "neutral"}
HELDOUT_EVERY = 6


def _openings() -> list[tuple[str, bool]]:
    return [(frame.format(s=subject), needs_verb) for subject in SUBJECTS for frame, needs_verb in FRAMES]


def demo_prompts() -> tuple[list[str], list[str]]:
    """The demo's 120 review openings as (train, heldout): every 6th opening is held out (100 + 20).

    Held-out prompts also appear in the SFT corpus; they are held out of preference collection and PPO only.
    """
    prompts = [text for text, _ in _openings()]
    train = [p for i, p in enumerate(prompts) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
    heldout = [p for i, p in enumerate(prompts) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    return train, heldout


def _polarity(rng: random.Random) -> str:
    return rng.choices(POLARITIES, weights=(0.4, 0.4, 0.2))[0]


def _adjective(rng: random.Random, polarity: str) -> str:
    return rng.choice(INTENSIFIERS) + rng.choice(_ADJECTIVES[polarity])


def _related(rng: random.Random, polarity: str, keep: bool) -> str:
    """Polarity of a clause joined by "and" (keep=True) or "but": kept / flipped 80% of the time."""
    if rng.random() < 0.8:
        return polarity if keep else _OPPOSITE[polarity]
    return _polarity(rng)


def _sentence(rng: random.Random, opening: str, needs_verb: bool) -> str:
    polarity = _polarity(rng)
    head = f"{opening} {rng.choice(VERBS) + ' ' if needs_verb else ''}{_adjective(rng, polarity)}"
    subject = rng.choice(SUBJECTS)
    kind = rng.randrange(6)
    if kind == 0:
        tail = "."
    elif kind == 1:
        tail = f"and {_adjective(rng, _related(rng, polarity, keep=True))} ."
    elif kind == 2:
        tail = f"but {_adjective(rng, _related(rng, polarity, keep=False))} ."
    elif kind == 3:
        tail = f", and {subject} was {_adjective(rng, _related(rng, polarity, keep=True))} ."
    elif kind == 4:
        tail = f", but {subject} was {_adjective(rng, _related(rng, polarity, keep=False))} ."
    else:
        tail = rng.choice(_ENDINGS[_related(rng, polarity, keep=True)])
    return f"{head} {tail}"


def build_corpus(num_sentences: int = 4000, seed: int = 0) -> list[str]:
    """`num_sentences` review sentences, each starting with a demo prompt; the same for the same seed."""
    rng = random.Random(seed)
    openings = _openings()
    return [_sentence(rng, *rng.choice(openings)) for _ in range(num_sentences)]
