"""One row of a preference data set, in any format TRL's preference trainers read, as a `Preference`.

    explicit prompt          {"prompt": "...", "chosen": "...", "rejected": "..."}
    implicit prompt          {"chosen": "\\n\\nHuman: Hi\\n\\nAssistant: Hello!",
                              "rejected": "\\n\\nHuman: Hi\\n\\nAssistant: Go away."}
    explicit conversational  {"prompt": [turns ending with a user turn], "chosen": [{"role": "assistant", ...}], ...}
    implicit conversational  {"chosen": [turns..., assistant turn], "rejected": [the same turns..., assistant turn]}

Every format may carry a finite `margin`. An implicit prompt (Anthropic's hh-rlhf) is the shared beginning of the two
dialogues up to and including the last "\\n\\nAssistant:" in it (a conversation: up to its last shared user turn);
the answers are what follows, kept as they are (an empty answer is an answer). A response is one assistant answer:
a row whose chosen or rejected goes on past it (a further Human turn, several turns) is refused, since the studio
stores one answer per response. With `chat_turns` (the policy has a chat template), a prompt written as an
hh-rlhf dialogue becomes role turns (Human -> user, Assistant -> assistant) so the template wraps each turn, and
its answers lose the spaces around them, as the template writes turns; without it the prompt stays the plain text.
Problems raise InvalidInput naming `where` (e.g. "line 87").
"""

from __future__ import annotations

import math
import re

from labeling.transfer.conversations import SPEAKERS, TURN_SEPARATOR, Message, answer_text, conversation_text
from labeling.transfer.importing import MAX_PROMPT_CHARS, check_text, prompt_and_turns
from storage.errors import InvalidInput
from storage.preferences import Preference

MAX_RESPONSE_CHARS = 100_000
ANSWER_MARK = f"{TURN_SEPARATOR}{SPEAKERS['assistant']}:"  # "\n\nAssistant:", which ends an implicit prompt
_ROLES = {speaker: role for role, speaker in SPEAKERS.items()}
_TURN_MARK = re.compile(f"{TURN_SEPARATOR}({'|'.join(_ROLES)}):")
_NEXT_TURN = f"{TURN_SEPARATOR}{SPEAKERS['user']}:"


def preference_from_row(row: object, where: str, chat_turns: bool = False) -> Preference:
    """The Preference of one data set row, in whichever format it is written."""
    if not isinstance(row, dict):
        raise InvalidInput(f"{where}: expected an object with chosen and rejected (and prompt, or whole dialogues)")
    chosen, rejected = (_column(row, name, where) for name in ("chosen", "rejected"))
    _check_same_kind(chosen, rejected, where)
    if chosen == rejected:
        raise InvalidInput(f"{where}: chosen and rejected are the same text; remove the row")
    if row.get("prompt") is None:
        prompt, chosen, rejected = _implicit(chosen, rejected, where)
    else:
        prompt = row["prompt"]
        chosen, rejected = answer_text(chosen, "chosen", where), answer_text(rejected, "rejected", where)
    preference = _preference(prompt, chosen, rejected, _margin(row, where), where, chat_turns)
    if preference.chosen == preference.rejected:
        raise InvalidInput(f"{where}: chosen and rejected give the same answer once the spaces around them are "
                           "removed; remove the row")
    return preference


def shared_length(a, b) -> int:
    """Length of the longest shared beginning of two strings or lists (a binary search of slice comparisons)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def split_dialogues(chosen: str, rejected: str) -> tuple[str, str, str] | None:
    """(prompt, chosen answer, rejected answer) of two hh-rlhf dialogues: the prompt runs up to and including the
    last "\\n\\nAssistant:" of their shared beginning. None when that beginning holds none."""
    end = chosen.rfind(ANSWER_MARK, 0, shared_length(chosen, rejected))
    if end < 0:
        return None
    end += len(ANSWER_MARK)
    return chosen[:end], chosen[end:], rejected[end:]


def dialogue_turns(prompt: str) -> list[Message] | None:
    """The role turns of a prompt written as an hh-rlhf dialogue ("\\n\\nHuman: ...\\n\\nAssistant:"), each turn's
    text without the spaces around it; None when the text is not such a dialogue ending with a Human turn."""
    if not prompt.endswith(ANSWER_MARK):
        return None
    body = prompt[:-len(ANSWER_MARK)]
    parts = _TURN_MARK.split(body if body.startswith(TURN_SEPARATOR) else TURN_SEPARATOR + body)
    if parts[0].strip() or len(parts) < 3:
        return None
    speakers, texts = parts[1::2], parts[2::2]  # a speaker mark with no text after it is left out
    turns = [{"role": _ROLES[speaker], "content": text.strip()} for speaker, text in zip(speakers, texts, strict=False)]
    return turns if turns[-1]["role"] == "user" else None


def _column(row: dict, name: str, where: str):
    if row.get(name) is None:
        raise InvalidInput(f"{where}: no {name!r} field; rows need chosen and rejected, and a prompt unless both are "
                           "whole dialogues sharing it")
    return row[name]


def _implicit(chosen: str | list, rejected: str | list, where: str) -> tuple[str | list, str, str]:
    """(prompt, chosen answer, rejected answer) of a row whose chosen and rejected are whole dialogues."""
    if isinstance(chosen, str):
        split = split_dialogues(chosen, rejected)
        if split is None:
            raise InvalidInput(f"{where}: no prompt column, and chosen and rejected share no beginning ending with "
                               f"{ANSWER_MARK!r}; give a prompt, or whole dialogues that share the prompt")
        for name, answer in zip(("chosen", "rejected"), split[1:], strict=True):
            if _NEXT_TURN in answer:
                raise InvalidInput(f"{where}: {name!r} goes on past its answer after the shared prompt (a further "
                                   f"{_NEXT_TURN.strip()!r} turn); the studio stores one answer per response")
        return split
    shared = shared_length(chosen, rejected)
    users = [i for i, turn in enumerate(chosen[:shared]) if isinstance(turn, dict) and turn.get("role") == "user"]
    if not users:
        raise InvalidInput(f"{where}: no prompt column, and chosen and rejected share no user turn; give a prompt, "
                           "or whole conversations that share the prompt turns")
    end = users[-1] + 1
    return chosen[:end], answer_text(chosen[end:], "chosen", where), answer_text(rejected[end:], "rejected", where)


def _check_same_kind(chosen, rejected, where: str) -> None:
    """Chosen and rejected are both text or both lists of turns."""
    for name, value in (("chosen", chosen), ("rejected", rejected)):
        if not isinstance(value, (str, list)):
            raise InvalidInput(f"{where}: {name!r} is {type(value).__name__}, not text or a list of turns")
    if isinstance(chosen, str) != isinstance(rejected, str):
        kinds = ["text" if isinstance(v, str) else "conversational (a list of turns)" for v in (chosen, rejected)]
        raise InvalidInput(f"{where}: chosen is {kinds[0]} and rejected is {kinds[1]}; write both as text or both "
                           "as lists of turns")


def _preference(prompt, chosen: str, rejected: str, margin: float | None, where: str,
                chat_turns: bool) -> Preference:
    """The Preference of a row's prompt (text or turns) and answers, after checking them."""
    prompt, messages = prompt_and_turns(prompt, where)
    if messages is None and chat_turns and (turns := dialogue_turns(prompt)) is not None:
        messages = turns
        prompt, chosen, rejected = conversation_text(messages), chosen.strip(), rejected.strip()
    check_text(prompt, "'prompt'", MAX_PROMPT_CHARS, where)
    for name, answer in (("chosen", chosen), ("rejected", rejected)):
        check_text(answer, repr(name), MAX_RESPONSE_CHARS, where)
    return Preference(prompt, chosen, rejected, margin, messages)


def _margin(row: dict, where: str) -> float | None:
    margin = row.get("margin")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))
                               or not math.isfinite(margin)):
        raise InvalidInput(f"{where}: 'margin' must be a finite number (or absent)")
    return None if margin is None else float(margin)
