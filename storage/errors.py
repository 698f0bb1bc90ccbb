"""Domain errors. Every message says what was wrong and what to do, in the user's words."""


class StudioError(Exception):
    """Base for errors shown to the user as one line (CLI: exit code 2)."""


class NotAStudioStore(StudioError):
    """The file exists but is not an RLHF Studio store."""


class StoreFromNewerVersion(StudioError):
    """The store was written by a newer version of the studio."""


class StoreUnavailable(StudioError):
    """The store cannot be opened or written (permissions, disk full, locked)."""


class NotFound(StudioError):
    """A referenced row (pair, job, policy...) does not exist."""


class InvalidInput(StudioError):
    """A value given by the user is malformed or out of range."""


class Conflict(StudioError):
    """The action conflicts with the current state (a job already running, a pair not reserved, a port in use...)."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none), fit to quote in a one-line
    error: control characters (a library's message may hold some) shown as `?`."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return "".join(c if c.isprintable() else "?" for c in line)
