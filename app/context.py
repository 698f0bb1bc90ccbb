"""What every tab's callbacks share: the store, who is asking (the logged-in user under --auth), and how the
user's mistakes reach the browser (one escaped line: Gradio shows error and warning messages as HTML)."""

from __future__ import annotations

import contextlib
import html
from dataclasses import dataclass

import gradio as gr

from storage import Store
from storage.errors import StudioError

from .auth import Users


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
    users: Users | None = None

    def annotator(self, request: gr.Request | None, typed_name: str | None) -> str | None:
        """Under --auth the annotator is the logged-in user, whatever name was typed; otherwise the typed name."""
        if self.users is not None:
            username = getattr(request, "username", None)
            if not username:
                raise gr.Error("log in first: this studio requires a user name and password")
            return username
        return typed_name

    def require_admin(self, request: gr.Request | None) -> None:
        """Under --auth only users marked `admin` in the auth file may run jobs, import, export or edit guidelines."""
        if self.users is not None and not self.users.is_admin(getattr(request, "username", None)):
            raise gr.Error("only an admin can do this; ask a user marked `admin` in the auth file")
