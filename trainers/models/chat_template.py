"""Chat templates rendered within bounds: a model folder's template is code the studio runs on every prompt.

Jinja's sandbox (the one transformers uses) keeps a template from reaching Python's internals, but not from
running long or growing large: `range` allows 100,000 steps and loops nest, and `'x' * 100000 * 100000` asks for
10 GB. Here each render has a budget: MAX_STEPS loop steps, calls and filter calls, and MAX_SECONDS; a string, list
or output over MAX_TEXT items is refused before it is built (`*`, `+`, `~`, `%`, `**`, the widths and counts given
to filters and string methods). Whatever a template does wrong ends as one InvalidInput line, naming the problem.
The environment is configured as transformers' (`trim_blocks`, `lstrip_blocks`, `loopcontrols`, `tojson`,
`raise_exception`, `strftime_now`, `{% generation %}`), so a template renders the same text here.

    render_chat_template(template, messages=[...], add_generation_prompt=True, eos_token="</s>")
"""

from __future__ import annotations

import functools
import json
import re
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from storage.errors import InvalidInput, first_line

MAX_STEPS = 1_000_000  # loop steps, calls and filter calls of one render (a real template takes a few thousand)
MAX_SECONDS = 2.0  # of one render
MAX_TEXT = 1_000_000  # characters of a string or the output, items of a list
MAX_RANGE = 100_000  # items of one range(), as Jinja's sandbox
MAX_ARGUMENT = 10_000  # a width or count given to a filter that sizes its result, or taken from a format's arguments
MAX_INT_BITS = 10_000  # of a number a template computes
_SIZED_FILTERS = {"center", "indent", "wordwrap", "batch", "slice", "tojson"}  # an int argument sizes the result
_WIDE_FORMAT = re.compile(r"\d{5,}")  # a width or precision of 10,000 or more in a format string
_WIDTH_FROM_ARGUMENTS = re.compile(r"\{[^{}]*:[^{}]*\{|%[-#0 +]*(\*|\d*\.\*)")  # `{:{}}`, `%*d`, `%.*s`
_WIDTH_METHODS = {"center", "ljust", "rjust", "zfill", "expandtabs"}  # str methods whose int argument sizes the result
_REFUSED_METHODS = {"translate", "maketrans"}  # a table can map each character to a long string


class TemplateLimit(jinja2.exceptions.SecurityError):
    """A render went past a bound (steps, time, size)."""


@dataclass
class _Budget:
    steps: int = 0
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)

    def tick(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise TemplateLimit(f"it took over {MAX_STEPS:,} steps (loops, calls)")
        if self.steps % 256 == 0 and time.monotonic() > self.deadline:
            raise TemplateLimit(f"it ran over {MAX_SECONDS:g} s")


_BUDGET: ContextVar[_Budget] = ContextVar("chat_template_budget")


def _tick() -> None:
    budget = _BUDGET.get(None)
    if budget is not None:  # None while Jinja folds constants at compile time
        budget.tick()


def _size(value) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _check_size(size: int, what: str = "a text") -> None:
    if size > MAX_TEXT:
        raise TemplateLimit(f"{what} of {size:,} characters or items, over {MAX_TEXT:,}")


def _check_format(format_text, arguments=()) -> None:
    """Refuse a format (`%` or str.format) that would write a width of 10,000 or more, written in it or taken from
    its arguments (`%*d`, `{:{}}`)."""
    if not isinstance(format_text, str):
        return
    if _WIDE_FORMAT.search(format_text):
        raise TemplateLimit("a format with a width or precision of 10,000 or more")
    values = arguments.values() if isinstance(arguments, dict) else \
        arguments if isinstance(arguments, (tuple, list)) else (arguments,)
    if _WIDTH_FROM_ARGUMENTS.search(format_text) and any(
            isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_ARGUMENT for v in values):
        raise TemplateLimit("a format taking a width of 10,000 or more from its arguments")


def _check_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateLimit(f"a number of over {MAX_INT_BITS:,} bits")


class _Bounds(NodeTransformer):
    """Rewrites a parsed template so every loop counts its steps and every `~` checks its size first."""

    def visit_For(self, node: nodes.For) -> nodes.For:
        self.generic_visit(node)
        node.iter = nodes.Call(nodes.EnvironmentAttribute("studio_steps"), [node.iter], [], None, None)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Call:
        self.generic_visit(node)
        return nodes.Call(nodes.EnvironmentAttribute("studio_concat"), node.nodes, [], None, None)


class _Generation(Extension):
    """`{% generation %}...{% endgeneration %}` (transformers marks assistant text with it): renders its body."""

    tags = frozenset({"generation"})

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """`namespace()` refusing attributes that start with `_` (as transformers')."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attributes = dict(*args, **kwargs)
        for name in attributes:
            _Namespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attributes)

    def __setitem__(self, name, value):
        _Namespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with `_` ({name[:20]!r})")


class _Dict:
    """`dict()` and `dict.fromkeys()` without the type itself (as transformers')."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(format_text: str) -> str:
    _check_format(format_text)
    return datetime.now().strftime(format_text)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """transformers' `tojson`: no HTML escaping, its options exposed."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _bounded_range(*args) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise TemplateLimit(f"a range of {len(numbers):,} numbers, over {MAX_RANGE:,}")
    return numbers


def _precheck_filter(name: str, value, params: list) -> None:
    """Refuse a filter call whose arguments would make a result too large, before it runs."""
    for param in params if name in _SIZED_FILTERS else ():
        if isinstance(param, int) and not isinstance(param, bool) and abs(param) > MAX_ARGUMENT:
            raise TemplateLimit(f"the filter {name} was given {param:,}, over {MAX_ARGUMENT:,}")
        if isinstance(param, str) and len(param) > MAX_ARGUMENT:
            raise TemplateLimit(f"the filter {name} was given a text of over {MAX_ARGUMENT:,} characters")
    if name == "replace" and isinstance(value, str) and len(params) >= 2 and isinstance(params[0], str) \
            and isinstance(params[1], str) and params[0]:
        _check_size(len(value) + value.count(params[0]) * max(0, len(params[1]) - len(params[0])))
    if name == "format":
        _check_format(value, params)


def _bounded_filter(name: str, function):
    """A filter that counts as a step, is refused when its arguments would build too much, and whose result is
    checked for size. The value it filters is the first argument after Jinja's own (context, environment)."""
    offset = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(function)
    def bounded(*args, **kwargs):
        _tick()
        value = args[offset] if len(args) > offset else None
        if name == "join" and value is not None and not isinstance(value, str):
            value = list(value)  # measured before it is joined
            separator = args[offset + 1] if len(args) > offset + 1 else kwargs.get("d", "")
            _check_size(sum(_size(item) or 8 for item in value) + len(value) * _size(separator))
            args = (*args[:offset], value, *args[offset + 1:])
        _precheck_filter(name, value, [*args[offset + 1:], *kwargs.values()])
        result = function(*args, **kwargs)
        _check_size(_size(result))
        return result

    return bounded


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the bounds of this module, configured as transformers renders chat templates."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
        self.filters["tojson"] = _tojson
        self.filters = {name: _bounded_filter(name, function) for name, function in self.filters.items()}
        self.globals.pop("lipsum", None)  # writes as many paragraphs as asked
        self.globals.update(range=_bounded_range, raise_exception=_raise_exception, strftime_now=_strftime_now,
                            dict=_Dict(), namespace=_Namespace)

    def _parse(self, source, name, filename):
        return _Bounds().visit(super()._parse(source, name, filename))

    def studio_steps(self, iterable):
        """What a `{% for %}` loops over, one step per item."""
        for item in iterable:
            _tick()
            yield item

    def studio_concat(self, *parts) -> str:
        """`a ~ b ~ ...`, checked for size before it is joined."""
        texts = [part if isinstance(part, str) else str(part) for part in parts]
        _check_size(sum(map(len, texts)))
        return "".join(texts)

    def call_binop(self, context, operator: str, left, right):
        _tick()
        if operator == "*":
            sequence, times = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(times, int) and _size(sequence):
                _check_size(_size(sequence) * max(times, 0))
            elif isinstance(left, int) and isinstance(right, int):
                _check_bits(left.bit_length() + right.bit_length())
        elif operator == "+" and _size(left) and _size(right):
            _check_size(_size(left) + _size(right))
        elif operator == "%" and isinstance(left, str):
            _check_format(left, right)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            _check_bits(max(right, 0) * left.bit_length())
        result = super().call_binop(context, operator, left, right)
        _check_size(_size(result))
        return result

    def call(self, context, function, /, *args, **kwargs):
        _tick()
        method = getattr(function, "__name__", "")
        owner = getattr(getattr(function, "__wrapped__", function), "__self__", None)  # str.format comes wrapped
        if isinstance(owner, str):
            if method in _REFUSED_METHODS:
                raise TemplateLimit(f"str.{method} is not allowed in a chat template")
            if method in _WIDTH_METHODS and any(isinstance(a, int) and a > MAX_TEXT for a in args):
                raise TemplateLimit(f"str.{method} to a width over {MAX_TEXT:,}")
            if method in ("format", "format_map"):
                mappings = [value for argument in args if isinstance(argument, dict) for value in argument.values()]
                _check_format(owner, [*args, *kwargs.values(), *mappings])
            if method == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]) and args[0]:
                _check_size(len(owner) + owner.count(args[0]) * max(0, len(args[1]) - len(args[0])))
            if method == "join" and args and not isinstance(args[0], str):
                items = list(args[0])
                _check_size(sum(_size(item) for item in items) + len(items) * len(owner))
                args = (items, *args[1:])
        result = super().call(context, function, *args, **kwargs)
        _check_size(_size(result))
        return result


_ENVIRONMENT = BoundedEnvironment()


@functools.lru_cache(maxsize=32)
def _compiled(template_text: str) -> jinja2.Template:
    try:
        return _ENVIRONMENT.from_string(template_text)
    except jinja2.TemplateSyntaxError as exc:
        raise InvalidInput(f"the model's chat template does not parse (line {exc.lineno}: {first_line(exc)}); fix "
                           "chat_template.jinja or the tokenizer config's chat_template") from None


def render_chat_template(template_text: str, **variables) -> str:
    """The template rendered with `variables` (messages, add_generation_prompt, special tokens), within the bounds of
    this module; InvalidInput (one line) for whatever goes wrong."""
    template = _compiled(template_text)
    token = _BUDGET.set(_Budget())
    try:
        chunks, size = [], 0
        for chunk in template.generate(**variables):
            size += len(chunk)
            _check_size(size, "an output")
            _tick()
            chunks.append(chunk)
        return "".join(chunks)
    except TemplateLimit as exc:
        raise InvalidInput(f"the model's chat template was stopped: {exc}; a chat template only lays out a "
                           "conversation, in far less: fix or replace it") from None
    # a template is code: whatever it raises (SecurityError, TypeError, RecursionError...) is its own mistake
    except Exception as exc:  # noqa: BLE001
        raise InvalidInput(f"the model's chat template failed ({type(exc).__name__}: {first_line(exc)[:200]}); "
                           "fix or replace it") from None
    finally:
        _BUDGET.reset(token)
