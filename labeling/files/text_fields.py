"""Text that reaches the studio from a person is Unicode: a lone surrogate (`"\\ud800"`, which JSON can escape and a
form in UTF-7 can carry) is no character, cannot be stored or hashed, and is refused in one line naming its field.
The served studio checks with `surrogate_field` in three doors: every argument of every listener and API endpoint
(`app.context.bind`, before the handler runs), the login gate's name and password (`app.door.sessions`), and a JSON
object of settings (`trainers.loop.config.settings_from_json`).

    surrogate_field({"annotator": "ada", "judgement": {"rationale": "\\udcff"}})   # 'judgement.rationale'
"""

from __future__ import annotations

from collections.abc import Iterator

from storage.errors import InvalidInput


def surrogate_field(values: dict[str, object]) -> str | None:
    """The name of the first field whose text holds a lone surrogate (inside lists and objects too: `judgement.
    rationale`, `settings[2]`), or None when every text is Unicode."""
    return next((path for path, text in texts(values) if not encodes(text)), None)


def encodes(text: str) -> bool:
    """Whether `text` is Unicode that UTF-8 (the store, a hash, a file) can hold: no surrogate, which in a Python
    string is always a lone one (a JSON parser decodes a pair whole). Encoding is C-fast: 79 µs for a
    100,000-character answer and its note."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def texts(values: dict[str, object]) -> Iterator[tuple[str, str]]:
    """Every text in `values` with the path of its field (`name`, `name.key`, `name[2]`; an object's keys under the
    object's own path), in order. Walked without recursion: a value nested as deep as a JSON parser allows is walked
    too."""
    stack = list(reversed(values.items()))
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            yield path, value
        elif isinstance(value, dict):
            stack.extend(reversed([(path, key) for key in value] + [(f"{path}.{key}", item)
                                                                    for key, item in value.items()]))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed([(f"{path}[{index}]", item) for index, item in enumerate(value)]))


def refuse_surrogates(values: dict[str, object]) -> None:
    """InvalidInput (one line naming the field) when a text in `values` holds a lone surrogate."""
    field = surrogate_field(values)
    if field is not None:
        raise InvalidInput(surrogate_message(field))


def surrogate_message(field: str) -> str:
    """The one line a refused field gets."""
    return (f"{field} holds a lone surrogate (a character code from \\ud800 to \\udfff, which is no text); nothing "
            "was stored: send it as valid Unicode")
