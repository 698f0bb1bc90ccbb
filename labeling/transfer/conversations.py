"""Prompts that are conversations: checking turns, and their plain-text form.

A prompt is plain text or a conversation: a list of `{"role", "content"}` turns (roles system, user, assistant)
that ends with a user turn, since the policy writes the next assistant turn. The plain-text form
("Human: ... / Assistant: ...", as Anthropic's hh-rlhf writes dialogues) is what a conversation shows as where
text is needed (the store's prompt text, a model without a chat template, the Label tab's plain view).

    check_conversation([{"role": "user", "content": "hi"}])        # returns the turns as plain dicts
    conversation_text([{"role": "user", "content": "hi"}])         # 'Human: hi'
    answer_text([{"role": "assistant", "content": "hello"}], "completion", "line 3", "demonstration")  # 'hello'
"""

from __future__ import annotations

from storage.errors import InvalidInput

ROLES = ("system", "user", "assistant")
SPEAKERS = {"system": "System", "user": "Human", "assistant": "Assistant"}  # plain-text names, hh-rlhf's
TURN_SEPARATOR = "\n\n"

Message = dict[str, str]
PromptInput = str | list[Message]  # what a prompt is, wherever it is turned into tokens


def check_conversation(messages, where: str = "prompt") -> list[Message]:
    """The turns as `[{"role", "content"}]` after checking them; raises InvalidInput naming `where` otherwise."""
    if not isinstance(messages, list) or not messages:
        raise InvalidInput(f"{where}: a conversation must be a non-empty list of {{role, content}} turns")
    turns = []
    for number, message in enumerate(messages, start=1):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise InvalidInput(f"{where}: turn {number} must be an object with a text `content`")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidInput(f"{where}: turn {number} has role {str(role)[:20]!r}; use one of {', '.join(ROLES)}")
        turns.append({"role": role, "content": message["content"]})
    if turns[-1]["role"] != "user":
        raise InvalidInput(f"{where}: the last turn is {turns[-1]['role']!r}; a prompt must end with a user turn "
                           "(drop the trailing answer, or import the row as preference data)")
    return turns


def conversation_text(messages: list[Message]) -> str:
    """The turns as plain text: 'Human: ...', 'Assistant: ...', 'System: ...' paragraphs."""
    return TURN_SEPARATOR.join(f"{SPEAKERS[m['role']]}: {m['content']}" for m in messages)


def prompt_text(prompt: PromptInput) -> str:
    """Display text of a prompt: itself when plain text, the plain-text form of a conversation."""
    return prompt if isinstance(prompt, str) else conversation_text(prompt)


def answer_text(value, column: str, where: str, stored: str = "response") -> str:
    """The answer written after a prompt in the data set column `column` of row `where`: text, or a list holding one
    assistant turn (the studio stores one answer per `stored`: response, demonstration); else InvalidInput, one line."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: {column!r} is {type(value).__name__}, not text or a list of turns")
    if len(value) != 1 or not isinstance(value[0], dict) or value[0].get("role") != "assistant":
        raise InvalidInput(f"{where}: {column!r} must hold exactly one assistant turn after the prompt; the studio "
                           f"stores one answer per {stored}")
    if not isinstance(value[0].get("content"), str):
        raise InvalidInput(f"{where}: {column!r}: the assistant turn needs a text `content`")
    return value[0]["content"]
