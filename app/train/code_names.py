"""Settings from the browser or the API never name code to run. Every path that starts a job with settings (Start
loop, Train reward model now, Run PPO/GRPO/DPO now, Run SFT, `/start_loop`, `/start_sft`) refuses, in one line and
before any job row is written, a `module:function` name (or `path/file.py:function`) in ANY setting, however deeply
it sits in a list or object: the oracle, a reward function, an option, an author's name. Only the command line names
code. The studio's own values are the exception: the default oracle, and the judge settings `serve` was started with
(an Ollama model such as `mistral:latest` reads like a code name).

    refuse_code_names(studio, config.to_dict())    # InvalidInput: "reward_functions[0].name 'os:system' names code ..."
"""

from __future__ import annotations

from app.context import Studio
from labeling.files.text_fields import texts
from labeling.queue.synthetic import DEFAULT_ORACLE
from storage.errors import InvalidInput


def names_code(text: str) -> bool:
    """Whether `text` reads as `module:function`: a word before the last colon (a module or a file's path: no spaces
    inside), a dotted Python name after it. "A warm film: really" is prose."""
    head, colon, tail = text.strip().rpartition(":")
    head = head.strip()
    return bool(colon and head) and not any(c.isspace() for c in head) and all(
        part.isidentifier() for part in tail.strip().split("."))


def studio_values(studio: Studio) -> dict[str, object]:
    """The settings the studio itself may hold that read like code names: the default oracle, the served judge."""
    return {"oracle": DEFAULT_ORACLE, **(studio.judge or {})}


def refuse_code_names(studio: Studio, settings: dict) -> None:
    """InvalidInput naming the first setting (by its path: `reward_functions[0].name`) whose text names code."""
    allowed = studio_values(studio)
    for path, text in texts(settings):
        if names_code(text) and allowed.get(path) != text:
            raise InvalidInput(f"{path} {text[:80]!r} names code to run, which only the command line may do "
                               "(python app.py loop, ppo, dpo or sft); the studio runs its built-ins only")
