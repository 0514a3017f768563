"""The one error type for user mistakes.

A :class:`ConfigError` names the offending field (a dotted path such as
``parallelism.tensor``), the value it had, and what would have been allowed.
The CLI prints it on one line and exits with status 2. Anything else that
escapes is an internal bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A user-facing configuration error.

    Args:
        field: dotted path of the offending field, e.g. ``"parallelism.tensor"``.
        value: the value that was given (``None`` when the field was missing).
        allowed: what would be accepted, in words.
        source: optional file name (and line) the value came from.
    """

    def __init__(self, field: str, value: Any, allowed: str, source: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        self.source = source
        super().__init__(self.message())

    def message(self) -> str:
        """``source: field = value: allowed``, always on one line."""
        where = f"{self.source}: " if self.source else ""
        shown = _short_repr(self.value)
        field = self.field if str(self.field).strip() else "(a field with no name)"
        return _one_line(f"{where}{field} = {shown}: {self.allowed}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # a user object whose repr fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Note(UserWarning):
    """A visible default taken for the user (a training length, say): the CLI prints it as
    one ``note:`` line on stderr whatever the warning filters say; the Python API leaves it
    to :mod:`warnings`."""
