"""Cluster aliases and flow names, made from bootstrap servers, file names and MM2 aliases.

An alias is lower-case letters, digits and ``-`` (it names the origin in provenance headers, so
it keeps its ``-``). A flow is named ``<source>_to_<target>`` with every ``-`` of the aliases
written ``_``, so its ``REPLICATOR_FLOWS__<NAME>__*`` variables can be exported from a shell.
Both are made unique with a numbered suffix, and a flow name is at most :data:`MAX_FLOW_NAME`
characters.
"""

from __future__ import annotations

import re

MAX_FLOW_NAME = 63


def normalise_alias(name: str) -> str:
    """A cluster alias from a file stem or an MM2 alias: lower-case, other characters ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "cluster"


def unique(name: str, taken: set[str], joiner: str = "-") -> str:
    """``name``, or ``name<joiner>2``, ``name<joiner>3``... whichever is not ``taken`` yet (and
    is now)."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{joiner}{n}"
    taken.add(candidate)
    return candidate


def flow_name(source: str, target: str, taken: set[str]) -> str:
    """``<source>_to_<target>`` (``-`` written ``_``), shortened and numbered as needed."""
    name = f"{source}_to_{target}"
    if len(name) > MAX_FLOW_NAME:
        half = (MAX_FLOW_NAME - len("_to_") - 3) // 2  # room for a "_<n>" suffix
        name = f"{source[:half].rstrip('-')}_to_{target[:half].rstrip('-')}"
    return unique(name.replace("-", "_"), taken, joiner="_")
