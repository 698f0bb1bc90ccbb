"""app.render: markdown and conversations rendered for gr.HTML (which sanitizes nothing). Hostile text must come out
with no element that runs or loads anything, no event handler, no link but http(s)/mailto, and its text visible. The
Label tab's guidelines (an owner's markdown) go through the same renderer."""

import re
from html.parser import HTMLParser

import pytest

from app.context import Studio
from app.label import label_tab
from app.render import markdown_html, panes_html, plain_html, text_html, turns_html
from labeling.transfer.conversations import conversation_text
from storage.settings import set_setting

# Every element and attribute the renderer may produce; anything else fails the audit.
TAGS = {"p", "br", "em", "strong", "s", "code", "pre", "a", "span", "div", "section", "blockquote", "hr", "ul", "ol",
        "li", "table", "thead", "tbody", "tr", "th", "td", "h1", "h2", "h3", "h4", "h5", "h6"}
ATTRIBUTES = {"href", "title", "class", "style", "target", "rel", "referrerpolicy", "data-role", "id", "aria-label",
              "start"}
SAFE_HREF = re.compile(r"^(https?|mailto):", re.IGNORECASE)
SAFE_STYLE = re.compile(r"^text-align:(left|right|center)$")

HOSTILE = {  # payload -> the text a reader must still see
    "<script>alert(1)</script>": "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>": "<img src=x onerror=alert(1)>",
    "<iframe src=\"http://example.com/\"></iframe>": "<iframe src=\"http://example.com/\"></iframe>",
    "<svg onload=alert(1)>": "<svg onload=alert(1)>",
    "<div onclick=alert(1)>click</div>": "<div onclick=alert(1)>click</div>",
    "<style>body{display:none}</style>": "<style>body{display:none}</style>",
    "<a href=\"javascript:alert(1)\">x</a>": "<a href=\"javascript:alert(1)\">x</a>",
    "[x](javascript:alert(1))": "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))": "[x](JaVaScRiPt:alert(1))",
    "[x](jav&#x61;script:alert(1))": "[x](javascript:alert(1))",  # the entity is decoded, the link refused
    "[x](vbscript:msgbox(1))": "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)":
        "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](//evil.example/a)": "[x](//evil.example/a)",
    "<javascript:alert(1)>": "<javascript:alert(1)>",
    "[x][r]\n\n[r]: javascript:alert(1)": "[x][r]",
    "![i](http://example.com/a.png)": "[image: i <http://example.com/a.png>]",
    "![i](data:image/png;base64,iVBORw0KGgo=)": "![i](data:image/png;base64,iVBORw0KGgo=)",
    "[![i](http://example.com/a.png)](http://example.com/)": "[image: i <http://example.com/a.png>]",
    "```html\n<script>alert(1)</script>\n<img src=x onerror=alert(1)>\n```":
        "<script>alert(1)</script>\n<img src=x onerror=alert(1)>",
    "`<iframe src=x>` and `<img src=x onerror=alert(1)>`": "<iframe src=x> and <img src=x onerror=alert(1)>",
    "[x](http://example.com \"t\\\" onmouseover=alert(1) \\\"\")": "x",
    "```\" onmouseover=\"alert(1)\ncode\n```": "code",
    "| a | <img src=x onerror=alert(1)> |\n|---|---|\n| [x](javascript:alert(1)) | `<script>` |":
        "[x](javascript:alert(1))",
}


class Audit(HTMLParser):
    """Parses rendered HTML as a browser would: the elements and attributes in it, and its text."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text = ""
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text += data

    def problems(self) -> list[str]:
        """Everything that could run script, load a resource or leave the allowlists."""
        found = []
        for tag, attrs in self.elements:
            if tag not in TAGS:
                found.append(f"element <{tag}>")
            for name, value in attrs.items():
                if name.startswith("on") or name not in ATTRIBUTES:
                    found.append(f"attribute {name} on <{tag}>")
                if name == "href" and not SAFE_HREF.match(value or ""):
                    found.append(f"href {value!r}")
                if name == "style" and not SAFE_STYLE.match(value or ""):
                    found.append(f"style {value!r}")
        return found


@pytest.mark.parametrize("payload", list(HOSTILE))
def test_hostile_markdown_runs_nothing_loads_nothing_and_stays_readable(payload):
    rendered = markdown_html(payload)
    audit = Audit(rendered)
    assert audit.problems() == []
    assert not re.search(r"<(script|img|iframe|svg|style|object|embed)\b", rendered, re.IGNORECASE)
    tags = re.sub(r'"[^"]*"', '""', "".join(re.findall(r"<[^>]*>", rendered)))  # attribute values emptied
    assert not re.search(r"\son\w+\s*=", tags, re.IGNORECASE)  # no event handler attribute in any tag
    assert HOSTILE[payload] in audit.text


def test_raw_html_is_escaped_text_exactly():
    assert markdown_html("<script>alert(1)</script>") == "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"
    assert markdown_html("<img src=x onerror=alert(1)>") == "<p>&lt;img src=x onerror=alert(1)&gt;</p>\n"
    assert markdown_html("[x](javascript:alert(1))") == "<p>[x](javascript:alert(1))</p>\n"


def test_html_in_code_blocks_and_inline_code_is_code_text():
    fenced = markdown_html("```html\n<script>alert(1)</script>\n  indented\n```")
    assert fenced == ('<pre><code class="language-html">&lt;script&gt;alert(1)&lt;/script&gt;\n  indented\n'
                      "</code></pre>\n")
    assert markdown_html("run `<iframe src=x>` now") == "<p>run <code>&lt;iframe src=x&gt;</code> now</p>\n"


def test_only_http_https_and_mailto_links_are_anchors_and_they_open_apart():
    anchor = ('<a href="{}" target="_blank" rel="noopener noreferrer nofollow" referrerpolicy="no-referrer">x</a>')
    assert markdown_html("[x](https://example.com/a?b=1&c=2)") == (
        "<p>" + anchor.format("https://example.com/a?b=1&amp;c=2") + "</p>\n")
    assert markdown_html("[x](HTTP://example.com/)") == "<p>" + anchor.format("HTTP://example.com/") + "</p>\n"
    assert markdown_html("[x](mailto:a@example.com)") == "<p>" + anchor.format("mailto:a@example.com") + "</p>\n"
    assert "<a " not in markdown_html("[x](relative/page.html) [y](#top) [z](file:///etc/passwd)")


def test_images_are_never_elements():
    assert markdown_html("![a cat](http://example.com/cat.png)") == (
        '<p><span class="md-image">[image: a cat &lt;http://example.com/cat.png&gt;]</span></p>\n')


def test_tables_lists_emphasis_headings_quotes_and_line_breaks():
    table = Audit(markdown_html("| name | n |\n|:--|--:|\n| *a* | 1 |\n| b | 22 |"))
    assert [tag for tag, _ in table.elements] == ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "em", "td",
                                                  "tr", "td", "td"]
    assert table.elements[4] == ("th", {"style": "text-align:right"})
    nested = markdown_html("- one\n  - two\n    1. three\n- four")
    assert [tag for tag, _ in Audit(nested).elements] == ["ul", "li", "ul", "li", "ol", "li", "li"]
    assert markdown_html("# Title\n\n> quoted **bold** ~~gone~~") == (
        "<h1>Title</h1>\n<blockquote>\n<p>quoted <strong>bold</strong> <s>gone</s></p>\n</blockquote>\n")
    assert markdown_html("line one\nline two") == "<p>line one<br />\nline two</p>\n"  # a model's lines are kept


def test_plain_text_is_escaped_with_every_space_kept():
    assert plain_html("  a\n\n<b>&</b>\n") == '<pre class="text-plain">\n  a\n\n&lt;b&gt;&amp;&lt;/b&gt;\n</pre>'
    assert Audit(plain_html("\nfirst line blank")).text == "\n\nfirst line blank"  # the parser drops the first


def test_conversations_are_role_labelled_turns_of_markdown():
    turns = [{"role": "system", "content": "Be *brief*."}, {"role": "user", "content": "<img src=x onerror=alert(1)>"},
             {"role": "assistant", "content": "`ok`"}, {"role": "user", "content": "Again?"}]
    rendered = turns_html(turns)
    audit = Audit(rendered)
    assert audit.problems() == []
    divs = [attrs for tag, attrs in audit.elements if tag == "div" and "data-role" in attrs]
    assert [(d["data-role"], d["class"]) for d in divs] == [
        ("system", "turn turn-system"), ("user", "turn turn-user"), ("assistant", "turn turn-assistant"),
        ("user", "turn turn-user")]
    assert re.findall(r'<div class="turn-role">(\w+)</div>', rendered) == ["System", "User", "Assistant", "User"]
    assert "<em>brief</em>" in rendered and "<code>ok</code>" in rendered
    assert "<img src=x onerror=alert(1)>" in audit.text
    hostile_role = Audit(turns_html([{"role": '"><script>', "content": "x"}]))
    assert hostile_role.problems() == [] and "script" not in {tag for tag, _ in hostile_role.elements}


def test_text_html_holds_the_rendering_and_the_plain_form():
    turns = [{"role": "user", "content": "**hi** <b>"}]
    both = text_html(turns)
    assert both == ('<div class="studio-text"><div class="text-rendered">' + turns_html(turns) + "</div>"
                    + plain_html(conversation_text(turns)) + "</div>")
    assert text_html("*x*") == ('<div class="studio-text"><div class="text-rendered"><p><em>x</em></p>\n</div>'
                                '<pre class="text-plain">\n*x*</pre></div>')


def test_panes_carry_ids_and_escaped_labels():
    panes = panes_html([("response-left", "Left <b>", "L"), ("response-right", "Right", "R")])
    assert panes == ('<div class="text-panes">'
                     '<section class="text-pane" id="response-left" aria-label="Left &lt;b&gt;">'
                     '<div class="pane-label">Left &lt;b&gt;</div><div class="pane-body">L</div></section>'
                     '<section class="text-pane" id="response-right" aria-label="Right"><div class="pane-label">Right'
                     '</div><div class="pane-body">R</div></section></div>')


GUIDELINES = {  # what an owner's guidelines held in the probe -> the text annotators must still see
    '<div style="position:fixed;inset:0;z-index:9999;background:white">Read me first</div>':
        '<div style="position:fixed;inset:0;z-index:9999;background:white">Read me first</div>',
    "![a](http://tracker.example/track.png)": "[image: a <http://tracker.example/track.png>]",
    '<form action="http://evil.example/"><input name="password"><button>Go</button></form>':
        '<form action="http://evil.example/">',
    "<svg><circle r=9 /></svg> and <math><mi>x</mi></math>": "<svg><circle r=9 /></svg> and <math>",
    "<style>button{display:none}</style>\n\n**Be kind.**": "<style>button{display:none}</style>",
}


@pytest.mark.parametrize("guidelines", list(GUIDELINES))
def test_the_label_tabs_guidelines_go_through_the_same_renderer_as_model_output(store, guidelines):
    set_setting(store, "guidelines", guidelines)
    shown = label_tab.current_settings(Studio(store)).guidelines
    assert Audit(shown).problems() == []
    assert GUIDELINES[guidelines] in Audit(shown).text
    assert markdown_html(guidelines) in shown
    assert label_tab.current_settings(Studio(store)).guidelines_box == guidelines  # the owner edits the markdown
