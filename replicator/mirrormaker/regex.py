"""Topic rules: MirrorMaker's Java regexes (comma lists) as one Python regex.

This module owns :func:`java_regex`: a whitelist, ``topics`` or ``topics.exclude`` value read as
MirrorMaker reads it (a comma means ``|``, whole-name match), with Java's ``\\Q...\\E`` quoted
as Python escapes and a leading ``*`` written by mistake (a glob) read as ``.*``, both noted;
Java-only syntax that Python would read otherwise (a class inside a class, ``&&``) is refused.
And :func:`exclusion`: a flow's exclusion always keeps the replicator's internal topics out.
"""

from __future__ import annotations

import re
import warnings

from replicator.config.values import DEFAULT_TOPICS_EXCLUDE, split_outside, topic_regex
from replicator.errors import ConfigError
from replicator.mirrormaker.translation import Builder


def _alternatives(regex: str) -> list[str]:
    """The top-level alternatives of ``regex`` (split at ``|`` outside groups and classes)."""
    return split_outside(regex, "|", "(", ")")


def _quote_literals(regex: str) -> str:
    r"""Java's ``\Q...\E`` (a literal run) as Python's escaped characters."""
    return re.sub(r"\\Q(.*?)(?:\\E|$)", lambda m: re.escape(m.group(1)), regex, flags=re.DOTALL)


def _nested_class(regex: str) -> bool:
    """Whether ``regex`` has a ``[`` inside a character class: a union in Java, a plain ``[``
    in Python."""
    in_class, escaped, first = False, False, False
    for char in regex:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            if char == "[":
                return True
            if char == "]" and not first:
                in_class = False
            first = first and char == "^"
            continue
        elif char == "[":
            in_class, first = True, True
            continue
        first = False
    return False


def _compiles(regex: str) -> str | None:
    """``None`` when Python compiles ``regex`` with Java's meaning, else why not."""
    if _nested_class(regex):
        return "Java-only character class syntax (a class inside a class)"
    try:
        with warnings.catch_warnings():
            # A nested set or '&&' in a class: Java's union and intersection; Python warns that
            # it reads them otherwise.
            warnings.simplefilter("error", FutureWarning)
            re.compile(regex)
    except FutureWarning as exc:
        return f"Java-only character class syntax ({exc})"
    except re.error as exc:
        return str(exc)
    return None


def java_regex(b: Builder, text: str, origin: str) -> str:
    """A MirrorMaker topic rule (Java regexes, a comma list) as one Python regex."""
    regex = topic_regex(text)
    if "\\Q" in regex:
        regex = _quote_literals(regex)
        b.note(origin, "\\Q...\\E (a literal run in Java) read as the same escaped characters")
    if _compiles(regex) is None:
        return regex
    fixed: list[str] = []
    for part in _alternatives(regex):
        problem = _compiles(part)
        if problem is None:
            fixed.append(part)
            continue
        glob = "." + part if part.startswith("*") else None
        if glob is not None and _compiles(glob) is None:
            b.note(
                origin,
                f"{part!r} is not a regular expression (a glob?): read as {glob!r}, "
                "a leading * taken as .*",
            )
            fixed.append(glob)
            continue
        raise ConfigError(origin, f"{part!r} is not a valid regular expression here: {problem}")
    joined = "|".join(fixed)
    problem = _compiles(joined)
    if problem is not None:
        raise ConfigError(origin, f"{joined!r} is not a valid regular expression here: {problem}")
    return joined


def exclusion(user: str) -> str:
    """The replicator's internal-topic exclusion, and ``user``'s."""
    return f"{DEFAULT_TOPICS_EXCLUDE}|{user}"


INTERNAL_NOTE = (
    f"topics matching the replicator's internal-topic exclusion ({DEFAULT_TOPICS_EXCLUDE}) are "
    "never copied, in addition to the exclusions given"
)
