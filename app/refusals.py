"""A refused action on a tab's button (bad input, not allowed, nothing to stop): one message in the browser that goes
away by itself (a warning toast, not an error, which leaves "Error" pills over the tab's outputs), one line in the
server's terminal (no traceback: nothing crashed), and nothing on screen changed. A real crash still raises, and Gradio
logs its traceback. The public API endpoints keep raising errors: a client needs them.

    @refusing(JobView)
    def on_stop(studio, request): ...        # raises gr.Error("no job is running") -> a toast, JobView unchanged
"""

from __future__ import annotations

import functools
import html
import logging
from collections.abc import Callable
from dataclasses import fields

import gradio as gr

from storage.errors import StudioError

from .context import View, user_message

LOG = logging.getLogger("rlhf_studio.refused")
SHOWN_S = 8  # seconds the message stays on screen


def refuse(text: str) -> None:
    """Show `text` (plain, escaped here) as a toast that goes away, and log it as one line."""
    LOG.warning("refused: %s", text)
    gr.Warning(user_message(text), duration=SHOWN_S)


def unchanged(view: type[View]) -> View:
    """A view that leaves every one of its components as it is."""
    return view(**{f.name: gr.skip() for f in fields(view)})


def refusing(view: type[View]) -> Callable[[Callable], Callable]:
    """Wrap a button's handler: a StudioError or gr.Error it raises becomes `refuse(message)`, and its outputs stay
    as they are (`unchanged(view)`). The signature Gradio reads is the handler's (functools.wraps)."""

    def wrap(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def refused_or_done(*args, **kwargs):
            try:
                return handler(*args, **kwargs)
            except StudioError as exc:
                refuse(str(exc))
            except gr.Error as exc:  # its message is escaped already (`user_errors`) or a fixed text
                refuse(html.unescape(str(exc.message)))
            return unchanged(view)

        return refused_or_done

    return wrap
