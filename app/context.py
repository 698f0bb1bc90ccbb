"""What every tab shares: the store, who is asking (the logged-in user under --auth) and the audit trail of what
admins do, how the user's mistakes reach the browser (one escaped line: Gradio shows error and warning messages as
HTML), how quoted text reaches a markdown pane (`markdown_literal`), and how module-level handlers become Gradio
listeners (`bind`) that fill named outputs (`View`) and refresh a tab (`Refresh`).

A tab module holds a layout function returning its components as a dataclass, handlers at module level that take
the studio first (callable in a test with a Store and no browser), and a `build(studio)` that wires the two.
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields

import gradio as gr

from labeling.files.text_fields import surrogate_field, surrogate_message
from storage import Store
from storage.audit import AuditAction, record_action
from storage.errors import StudioError

from .audit import studio_actor
from .auth import AuthFile, Users


def markdown_literal(text: str) -> str:
    """Text shown as itself inside gr.Markdown, whatever it quotes (a name, a file's row, a model's template): HTML
    escaped, and no `[` or `!` left to open a link or an image (which the browser would fetch)."""
    escaped = html.escape(text, quote=False)
    for mark in "\\[]!":
        escaped = escaped.replace(mark, "\\" + mark)
    return escaped


def user_message(text: str) -> str:
    """Text for gr.Error / gr.Warning, escaped: Gradio renders those as HTML and they may quote what people typed."""
    return html.escape(text, quote=False)


@contextlib.contextmanager
def user_errors():
    """The user's mistakes (StudioError) become one-line, escaped errors in the browser or the API client."""
    try:
        yield
    except StudioError as exc:
        raise gr.Error(user_message(str(exc)), print_exception=False) from None


@dataclass(frozen=True)
class Studio:
    store: Store
    users: AuthFile | Users | None = None  # a served studio's auth file (re-read when it changes); tests: a snapshot
    accelerate_config: str | None = None  # serve --accelerate-config: the Train tab's jobs run their phases under it
    judge: dict | None = None  # serve --judge ...: the only judge settings a loop started here may name
                               # (app.train.judging)

    def annotator(self, request: gr.Request | None, typed_name: str | None) -> str | None:
        """Under --auth the annotator is the logged-in user, whatever name was typed; otherwise the typed name."""
        if self.users is not None:
            username = getattr(request, "username", None)
            if not username:
                raise gr.Error("log in first: this studio requires a user name and password", print_exception=False)
            return username
        return typed_name

    def is_admin(self, request: gr.Request | None) -> bool:
        """Whether the request is an admin's: under --auth a user marked `admin`; without --auth, anyone."""
        return self.users is None or self.users.is_admin(getattr(request, "username", None))

    def require_admin(self, request: gr.Request | None) -> None:
        """Under --auth only users marked `admin` in the auth file may run jobs, import, export or edit guidelines."""
        if not self.is_admin(request):
            raise gr.Error("only an admin can do this; ask a user marked `admin` in the auth file",
                           print_exception=False)  # a refusal, not a crash: no traceback in the terminal

    def record(self, request: gr.Request | None, action: AuditAction, **detail) -> None:
        """Add an admin action to the audit trail, by the logged-in user (`local admin (<OS user>)` without --auth)."""
        record_action(self.store, studio_actor(getattr(request, "username", None)), action, detail)


class View:
    """Base of a handler's named outputs (a dataclass): each field fills the layout component of the same name."""

    @classmethod
    def components(cls, layout) -> list:
        """The layout's components this view fills, in field order: the `outputs` of its listeners."""
        return [getattr(layout, f.name) for f in fields(cls)]

    def values(self) -> tuple:
        """The outputs in field order, as Gradio takes them."""
        return tuple(getattr(self, f.name) for f in fields(self))


def bind(handler: Callable, *leading) -> Callable:
    """`handler(*leading, ...)` as a Gradio listener, e.g. `bind(api_next_pair, studio)`. The rest of its signature,
    its type hints, name and docstring are kept (Gradio reads them to describe the API and to pass the request,
    which `functools.partial` would hide); a View it returns becomes its values in field order. Every listener and
    API endpoint refuses text that is no Unicode (`labeling.files.text_fields`) before the handler runs, naming the
    field."""
    signature = inspect.signature(handler)
    parameters = list(signature.parameters.values())[len(leading):]

    @functools.wraps(handler)
    def listener(*args):
        field = surrogate_field(named_arguments(parameters, args))
        if field is not None:
            raise gr.Error(user_message(surrogate_message(field)), print_exception=False)
        result = handler(*leading, *args)
        return result.values() if isinstance(result, View) else result

    listener.__signature__ = signature.replace(parameters=parameters)
    return listener


def named_arguments(parameters: list[inspect.Parameter], args: tuple) -> dict[str, object]:
    """Positional arguments by their parameter's name (those of a `*values` parameter as `values[0]`, ...)."""
    named, rest = {}, list(args)
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            named.update({f"{parameter.name}[{i}]": value for i, value in enumerate(rest)})
            return named
        if rest:
            named[parameter.name] = rest.pop(0)
    return named


@dataclass(frozen=True)
class TabLink:
    """A button on a tab that opens another tab (by its TITLE), which then fills as if opened by hand (app.door.ui)."""

    button: gr.Button
    tab: str


@dataclass(frozen=True)
class Refresh:
    """A listener a tab runs when the page loads and, with `on_open`, each time the tab is opened again."""

    fn: Callable
    inputs: list
    outputs: list
    on_open: bool = True
