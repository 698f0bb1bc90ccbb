"""Command-line options generated from a config dataclass, so help texts and defaults cannot drift from the fields.

Each field (each flat setting of a config grouped in parts, such as `LoopConfig`) becomes `--field-name` (plus any
aliases, and the old names in the dataclass's `RENAMED`), typed from its annotation (a `list` field takes a JSON list),
its help from `metadata["help"]` followed by the field's default, its choices from `metadata["choices"]` (an enum or a
list). Options default to None, so `given_options` returns only what the command line set and the dataclass fills in
the rest.

    add_options(parser, RewardConfig, aliases={"learning_rate": ["--lr"]}, skip=("round",))
    config = RewardConfig(**given_options(args, RewardConfig))
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Iterable

from ..settings import note_renamed

TYPES = {"int": int, "float": float, "str": str}


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def field_help(f: dataclasses.Field) -> str:
    """The field's help and its default, as the command line shows them (% escaped for argparse)."""
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    return f"{f.metadata['help']} (default: {default})".replace("%", "%%")


def add_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, config: type, *,
                skip: Iterable[str] = (), aliases: dict[str, list[str]] | None = None) -> None:
    """One option per field of the dataclass `config` (but those in `skip`), with `aliases[field]` and the field's
    old names (`config.RENAMED`, old -> new) as extra flags."""
    aliases = aliases or {}
    old_names = getattr(config, "RENAMED", {})
    for f in _fields(config, skip):
        old = [option_name(name) for name, new in old_names.items() if new == f.name]
        flags = [option_name(f.name), *aliases.get(f.name, []), *old]
        kind = _annotation(f).replace(" | None", "")
        store = _noting(argparse.BooleanOptionalAction if kind == "bool" else _Store, old)
        if kind == "bool":
            parser.add_argument(*flags, dest=f.name, action=store, default=None, help=field_help(f))
        elif kind == "list[str]":
            parser.add_argument(*flags, dest=f.name, action=store, nargs="+", default=None, help=field_help(f))
        elif kind == "list":
            parser.add_argument(*flags, dest=f.name, action=store, type=json_list, default=None, metavar="JSON",
                                help=field_help(f))
        elif kind in TYPES:
            choices = f.metadata.get("choices")
            parser.add_argument(*flags, dest=f.name, action=store, type=TYPES[kind], default=None, help=field_help(f),
                                choices=[str(c) for c in choices] if choices is not None else None)
        else:
            raise TypeError(f"{config.__name__}.{f.name}: no command-line option for type {f.type}; skip it")


class _Store(argparse.Action):
    """argparse's plain `store`, as a class `_noting` can extend."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


def _noting(action: type[argparse.Action], old: list[str]) -> type[argparse.Action]:
    """`action` that, given one of the `old` flags (or its `--no-` form), notes once which flag is the new one."""
    if not old:
        return action

    class Noting(action):
        def __call__(self, parser, namespace, values, option_string=None):
            negative = option_string.startswith("--no-")
            if option_string in old or (negative and "--" + option_string[5:] in old):
                new = self.option_strings[0]
                note_renamed(option_string, "--no-" + new[2:] if negative else new)
            super().__call__(parser, namespace, values, option_string)

    return Noting


def json_list(text: str) -> list:
    """A `list` option's value: a JSON list."""
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not valid JSON: {text[:60]!r}; write a JSON list") from None
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a JSON list; write [...]")
    return value


def given_options(args: argparse.Namespace, config: type, *, skip: Iterable[str] = ()) -> dict:
    """The fields of `config` that the command line set (options left out are absent)."""
    return {f.name: getattr(args, f.name) for f in _fields(config, skip) if getattr(args, f.name, None) is not None}


def _annotation(f: dataclasses.Field) -> str:
    """The field's type as written ("int", "float | None"), whether or not annotations were postponed."""
    if isinstance(f.type, str):
        return f.type
    return f.type.__name__ if isinstance(f.type, type) else str(f.type)


def _fields(config: type, skip: Iterable[str]) -> list[dataclasses.Field]:
    """The dataclass's fields, or the flat ones of a config grouped in parts (`LoopConfig.settings_fields`)."""
    skipped = set(skip)
    settings = config.settings_fields() if hasattr(config, "settings_fields") else dataclasses.fields(config)
    return [f for f in settings if f.name not in skipped]
