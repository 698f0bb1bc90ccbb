"""Prompts and model output as the browser shows them: markdown rendered safely, conversations as role-labelled
turns, and beside each rendering its plain text, which the "Plain text" toggle shows instead.

`gr.HTML` sanitizes nothing (Gradio 6 puts its value into the page with `innerHTML`), so what this module returns
is safe by construction, whatever the text holds:
- markdown-it-py with `html=False`: raw HTML in the text (`<script>`, `<img onerror=...>`, `<iframe>`) is escaped
  and shown as text, in code blocks and out of them;
- a link is an anchor only for an `http:`, `https:` or `mailto:` URL (checked after markdown-it decoded its entities
  and normalised it); any other (`javascript:`, `vbscript:`, `data:`, `file:`, relative) is no link and its markdown
  stays text. Anchors open a new tab with `rel="noopener noreferrer nofollow"`;
- an image is never an `<img>`: `![alt](src)` shows as the text `[image: alt <src>]`, so nothing is fetched;
- a single newline is a line break (a model's lines are kept as it wrote them).

    markdown_html("**bold** `<b>`")   # '<p><strong>bold</strong> <code>&lt;b&gt;</code></p>\\n'
    text_html(prompt.content)          # text as markdown, a conversation as turns; plus the plain form
    panes_html([("response-left", "Left response", html_a), ("response-right", "Right response", html_b)])
"""

from __future__ import annotations

import html
import re

import gradio as gr
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

from labeling.transfer.conversations import Message, PromptInput, prompt_text

LINK_SCHEMES = re.compile(r"^(?:https?|mailto):", re.IGNORECASE)  # the only links that become anchors
LINK_ATTRS = {"target": "_blank", "rel": "noopener noreferrer nofollow", "referrerpolicy": "no-referrer"}
TEXT_SCOPE = "text-scope"  # a container whose "Plain text" toggle (class PLAIN_TOGGLE) switches the texts inside it
PLAIN_TOGGLE = "plain-toggle"


class _SafeMarkdown(MarkdownIt):
    """CommonMark plus tables and strikethrough, raw HTML escaped, links only to the schemes of LINK_SCHEMES."""

    def __init__(self):
        super().__init__("commonmark", {"html": False, "breaks": True})
        self.enable(["table", "strikethrough"])
        self.add_render_rule("image", _image_as_text)
        self.add_render_rule("link_open", _link_open)

    def validateLink(self, url: str) -> bool:  # markdown-it's name
        return bool(LINK_SCHEMES.match(url))


def _image_as_text(renderer, tokens, idx, options, env) -> str:
    """`![alt](src)` as the text `[image: alt <src>]`: an image is never fetched."""
    token = tokens[idx]
    alt = renderer.renderInlineAsText(token.children or [], options, env)
    shown = f"[image: {alt} <{token.attrGet('src')}>]"
    return f'<span class="md-image">{escapeHtml(shown)}</span>'


def _link_open(renderer, tokens, idx, options, env) -> str:
    for name, value in LINK_ATTRS.items():
        tokens[idx].attrSet(name, value)
    return renderer.renderToken(tokens, idx, options, env)


_MARKDOWN = _SafeMarkdown()


def markdown_html(text: str) -> str:
    """Markdown rendered to HTML that runs nothing and loads nothing (see the module docstring)."""
    return _MARKDOWN.render(text)


def plain_html(text: str) -> str:
    """The text itself: escaped, every space and newline kept (the newline after <pre> is the one HTML drops)."""
    return f'<pre class="text-plain">\n{html.escape(text, quote=False)}</pre>'


def turns_html(messages: list[Message]) -> str:
    """A conversation as turns, each labelled with its role (System, User, Assistant) and rendered as markdown."""
    return "".join(_turn_html(str(m["role"]), m["content"]) for m in messages)


def _turn_html(role: str, content: str) -> str:
    role_attr = html.escape(role)  # the store holds checked roles; escaped all the same
    return (f'<div class="turn turn-{role_attr}" data-role="{role_attr}"><div class="turn-role">'
            f'{html.escape(role.capitalize())}</div><div class="turn-body">{markdown_html(content)}</div></div>')


def text_html(content: PromptInput) -> str:
    """Text (as markdown) or a conversation (as turns), with its plain form beside it for the toggle."""
    rendered = markdown_html(content) if isinstance(content, str) else turns_html(content)
    plain = plain_html(prompt_text(content))
    return f'<div class="studio-text"><div class="text-rendered">{rendered}</div>{plain}</div>'


def panes_html(panes: list[tuple[str, str, str]]) -> str:
    """Panes side by side, one per (element id, label, inner HTML): equal heights, each scrolling when long."""
    return '<div class="text-panes">' + "".join(
        f'<section class="text-pane" id="{pane_id}" aria-label="{html.escape(label)}">'
        f'<div class="pane-label">{html.escape(label)}</div><div class="pane-body">{inner}</div></section>'
        for pane_id, label, inner in panes) + "</div>"


def plain_text_toggle(elem_id: str) -> gr.Checkbox:
    """The "Plain text" switch: inside a TEXT_SCOPE container it shows every text's plain form (CSS, no round trip)."""
    return gr.Checkbox(label="Plain text", value=False, container=False, elem_id=elem_id, elem_classes=[PLAIN_TOGGLE],
                       min_width=120, scale=0)
