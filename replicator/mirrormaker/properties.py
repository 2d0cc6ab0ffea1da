"""Java ``.properties`` files, read as ``java.util.Properties.load`` reads them.

MirrorMaker's ``--consumer.config``/``--producer.config`` files and MirrorMaker 2's
``connect-mirror-maker.properties`` are Java properties files; reading them as Java does is what
lets them run unchanged. The grammar (``java.util.Properties.load(Reader)``):

- a *logical line* may span several physical lines: a line ending in an odd number of
  backslashes continues on the next, whose leading whitespace is dropped;
- blank lines and lines whose first non-blank character is ``#`` or ``!`` are comments;
- the key runs to the first unescaped ``=``, ``:`` or whitespace; whitespace around that
  separator (and one ``=`` or ``:``) is dropped; the rest of the line is the value;
- escapes: ``\\t \\n \\r \\f``, ``\\uXXXX``, and a backslash before any other character stands for
  that character (``\\=``, ``\\:``, ``\\ ``, ``\\\\``);
- a later key replaces an earlier one.

Pure, no I/O beyond :func:`load`.
"""

from __future__ import annotations

from pathlib import Path

from replicator.errors import PropertiesError

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse(text: str) -> dict[str, str]:
    """The properties in ``text``, in file order (a repeated key keeps its last value)."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        try:
            result[_unescape(key)] = _unescape(value)
        except PropertiesError as exc:
            raise PropertiesError(f"line {number}: {exc}") from None
    return result


def load(path: str | Path) -> dict[str, str]:
    """The properties in the file at ``path`` (UTF-8; Java 9+ reads properties files so)."""
    return parse(Path(path).read_text(encoding="utf-8"))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(_WHITESPACE)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
            pending = ""
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # continues on the next line
            pending += line[:-1]
            continue
        lines.append((start, pending + line))
        pending = None
    if pending is not None:  # a continuation at the end of the file
        lines.append((start, pending))
    return lines


def _split(line: str) -> tuple[str, str]:
    """The raw key and raw value of a logical line (escapes still in place)."""
    i, n = 0, len(line)
    while i < n:
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in _SEPARATORS or char in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(_WHITESPACE)
    if rest and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(raw: str) -> str:
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        char = raw[i]
        if char != "\\" or i + 1 >= n:
            if char != "\\":  # a lone backslash at the very end is dropped, as Java does
                out.append(char)
            i += 1
            continue
        following = raw[i + 1]
        if following == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"malformed \\uXXXX escape: {raw[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(following, following))
        i += 2
    return "".join(out)
