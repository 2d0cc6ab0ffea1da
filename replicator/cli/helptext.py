"""How ``--help`` is laid out: click's plain help, wrapped at spaces only.

Click re-flows each paragraph of a help text to the terminal (80 columns at most); its wrapper
also breaks words at their hyphens, which cut file names and options in two
(``connect-mirror-`` / ``maker.properties``). :class:`Group` and :class:`Command` give every
command a context whose formatter wraps at spaces alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from typer.core import TyperCommand, TyperGroup

# The click that typer runs on (its own copy since typer 0.22, the click package before): the
# classes are taken from typer, so its exceptions and help machinery stay its own.
_BaseContext = TyperCommand.context_class
_BaseFormatter = _BaseContext.formatter_class

# A character the wrapper never breaks at, standing in for '-' while a text is wrapped: one
# column wide, as the hyphen it replaces (U+2011, non-breaking hyphen).
_HELD = "\u2011"


class HelpFormatter(_BaseFormatter):  # type: ignore[misc,valid-type]
    """Click's help formatter, breaking lines at spaces only (never inside a hyphenated word)."""

    def write_text(self, text: str) -> None:
        start = len(self.buffer)
        super().write_text(text.replace("-", _HELD))
        self._release(start)

    def write_dl(
        self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        start = len(self.buffer)
        held = [(term, text.replace("-", _HELD)) for term, text in rows]
        super().write_dl(held, col_max, col_spacing)
        self._release(start)

    def _release(self, start: int) -> None:
        self.buffer[start:] = [part.replace(_HELD, "-") for part in self.buffer[start:]]


class Context(_BaseContext):  # type: ignore[misc,valid-type]
    formatter_class = HelpFormatter


class Group(TyperGroup):
    context_class = Context


class Command(TyperCommand):
    context_class = Context
