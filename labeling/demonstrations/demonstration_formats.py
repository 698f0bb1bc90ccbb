"""One row of a demonstrations data set, in any format TRL's SFTTrainer reads with a prompt, as an
`ImportedDemonstration`.

    prompt-completion          {"prompt": "...", "completion": "..."}
    conversational p-c         {"prompt": [turns ending with a user turn], "completion": [{"role": "assistant", ...}]}
    conversational             {"messages": [turns..., {"role": "assistant", "content": "..."}]}

In `messages`, the last turn must be the assistant's: it is the demonstration, and the turns before it (ending with a
user turn) the prompt. A row of plain `text` (TRL's language-modeling format) has no prompt to answer and is refused,
as are an empty answer, a NUL character and texts over the studio's limits. Extra columns are ignored. Problems raise
InvalidInput naming `where` (e.g. "line 87").

    demonstration_from_row({"prompt": "Hi", "completion": "Hello!"}, "line 1")
"""

from __future__ import annotations

from labeling.transfer.conversations import answer_text
from labeling.transfer.importing import MAX_PROMPT_CHARS, check_text, prompt_and_turns
from storage.demonstrations import ImportedDemonstration
from storage.errors import InvalidInput

MAX_DEMONSTRATION_CHARS = 100_000  # as a response (labeling.transfer.preference_formats.MAX_RESPONSE_CHARS)
COLUMNS = ("prompt", "completion", "messages")
_FORMATS = "prompt and completion, or messages ending with an assistant turn"


def demonstration_from_row(row: object, where: str) -> ImportedDemonstration:
    """The demonstration of one data set row, in whichever format it is written."""
    if not isinstance(row, dict):
        raise InvalidInput(f"{where}: expected an object with {_FORMATS}")
    if row.get("messages") is not None and row.get("completion") is None:
        prompt, answer = _split_messages(row["messages"], where)
    elif row.get("completion") is None:
        missing = "'completion'" if row.get("prompt") is not None else "'prompt' and 'completion' (or 'messages')"
        plain = " (a plain 'text' row has no prompt to answer)" if "text" in row else ""
        raise InvalidInput(f"{where}: no {missing} field{plain}; rows need {_FORMATS}")
    elif row.get("prompt") is None:
        raise InvalidInput(f"{where}: no 'prompt' field; rows need {_FORMATS}")
    else:
        prompt, answer = row["prompt"], answer_text(row["completion"], "completion", where, "demonstration")
    return _checked(prompt, answer, where)


def _split_messages(messages, where: str) -> tuple[list, str]:
    """(prompt turns, answer) of a conversation whose last turn is the assistant's answer."""
    if not isinstance(messages, list) or len(messages) < 2:
        raise InvalidInput(f"{where}: 'messages' must be a list of turns: the prompt's, then the assistant's answer")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant":
        raise InvalidInput(f"{where}: the last turn of 'messages' must be the assistant's: it is the demonstration")
    if not isinstance(last.get("content"), str):
        raise InvalidInput(f"{where}: 'messages': the assistant turn needs a text `content`")
    return messages[:-1], last["content"]


def _checked(prompt, answer: str, where: str) -> ImportedDemonstration:
    prompt, messages = prompt_and_turns(prompt, where)
    check_text(prompt, "'prompt'", MAX_PROMPT_CHARS, where)
    check_demonstration_text(answer, where)
    return ImportedDemonstration(prompt, answer, messages)


def check_demonstration_text(text: str, where: str) -> None:
    """InvalidInput naming `where` when a demonstration's text is empty, holds a NUL or is over the limit."""
    if not text.strip():
        raise InvalidInput(f"{where}: the demonstration is empty; write an answer or remove the row")
    check_text(text, "the demonstration", MAX_DEMONSTRATION_CHARS, where)
