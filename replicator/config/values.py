"""Values: what one setting may hold, checked on its own.

The names of the environment (:data:`ENV_PREFIX`, :data:`NESTED_DELIMITER`), the closed lists of
words a setting takes (enums), the annotated types that check a value as it is parsed
(:data:`Regex`, :data:`ReadableFile`), what a topic rule means as one regex
(:func:`topic_regex`), and how a message may show a value: never a secret, nor credentials typed
into another value (``user:secret@host:9092`` as a bootstrap server, :func:`shown_servers`,
:func:`shown_value`). No model and no environment here.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

ENV_PREFIX = "REPLICATOR_"
NESTED_DELIMITER = "__"

# Topic configs never synced to destinations: MirrorMaker 2's config.properties.exclude defaults
# (replica throttles, timestamp checks, unclean election, min.insync.replicas belong to each
# cluster).
DEFAULT_TOPIC_CONFIGS_EXCLUDE = (
    r"follower\.replication\.throttled\.replicas|leader\.replication\.throttled\.replicas|"
    r"message\.timestamp\..*|unclean\.leader\.election\.enable|min\.insync\.replicas"
)
# Internal topics of Kafka, Kafka Connect and the schema registry are never replicated by default.
DEFAULT_TOPICS_EXCLUDE = r"__.*|_schemas|_confluent.*|connect-(configs|offsets|status)"

# The settings naming the replicator's own topics (never application data), in message order.
INTERNAL_TOPIC_FIELDS = ("heartbeat_topic", "checkpoints_topic", "dead_letter_topic")

# A cluster alias: lower-case letters, digits and '-'.
ALIAS = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
# No '@' or '/': a host name holds neither, and credentials written into an address
# (user:secret@host:9092, sasl://user:pass@host) would be shown wherever the address is.
_HOST_PORT = re.compile(r"^[^\s:,@/]+:\d{1,5}$")
# What a host:port, or a typo of one, is made of: only such text is shown back in a message.
_ADDRESS_TEXT = re.compile(r"^[A-Za-z0-9._\-\[\]:]*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9_+.-]*://")
# A value that may hold a secret is never echoed in a message.
_SECRET_HINT = re.compile(r"@|pass|secret|token|credential|api.?key", re.IGNORECASE)


class SecurityProtocol(StrEnum):
    """How the replicator talks to one cluster."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    """SASL mechanisms supported per cluster."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class Compression(StrEnum):
    """Compression of the batches written to destination clusters."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class DataPath(StrEnum):
    """How fetched records become destination batches (``REPLICATOR_DATA_PATH``)."""

    AUTO = "auto"  # native when its extension imports, else python (said once)
    NATIVE = "native"  # records stay bytes (replicator._native); missing: exit 2
    PYTHON = "python"  # aiokafka's decoded records, batches built in Python (the reference)


class OffsetResetPolicy(StrEnum):
    """What a leg does when its source position is no longer in the log."""

    EARLIEST = "earliest"  # resume at the oldest record still held, counting what was lost
    HALT = "halt"  # stop that partition on that leg and report it


class OversizePolicy(StrEnum):
    """What a leg does with a record too large for the destination topic."""

    HALT = "halt"  # stop that partition on that leg and report it
    DEAD_LETTER = "dead-letter"  # park it in the local dead-letter topic and continue


class AclPolicy(StrEnum):
    """Which topic ACLs of a source a flow (or the ``_REPLICA`` mode) keeps on its target
    (:mod:`replicator.topics.acl_sync`)."""

    OFF = "off"  # none: grant them on each cluster
    # As MirrorMaker 2's sync.topic.acls: literal bindings renamed as the topics are, ALLOW Write
    # left out, ALLOW All turned into Read; what is left out or changed said once.
    MM2 = "mm2"
    # An application movable between datacenters: every binding on a replicated topic (and on
    # its real topic, in the _REPLICA mode), literal or prefixed, the same on every cluster.
    MOVABLE = "movable"


class ConfigSync(StrEnum):
    """How destination topic configs follow their source's after creation."""

    # Kept safe: a limit (retention, max.message.bytes) only ever raised, a destination's own
    # override kept until the source changes it, a config removed at the source kept.
    RAISE_ONLY = "raise-only"
    # As MirrorMaker 2: every copied config follows the source, down as well as up; a source
    # config at its default is removed on the destination (or, with defaults from the source,
    # set to the source's value).
    MIRROR = "mirror"


class HeartbeatPlacement(StrEnum):
    """Where a flow writes its heartbeats, and how its target names the copy."""

    # Into the source's heartbeat topic, copied to the target under the flow's naming: its age
    # and delay prove the whole path (the default of `replicator run`).
    SOURCE = "source"
    # As MirrorMaker 2 (the default of `replicator mm2`): into the target's heartbeat topic, and
    # into the source's for the reverse direction when no flow runs it; the copy is named
    # <source>.heartbeats under every naming policy, so MirrorClient-style tools find upstreams.
    MIRRORMAKER2 = "mirrormaker2"


class DefaultsFrom(StrEnum):
    """Whose default applies to a config the source topic leaves at its default (mirror sync;
    MirrorMaker 2's ``use.defaults.from``)."""

    TARGET = "target"
    SOURCE = "source"


class Naming(StrEnum):
    """How a flow names a source topic on its target cluster."""

    IDENTITY = "identity"  # the same name (MirrorMaker 1, MM2's IdentityReplicationPolicy)
    PREFIX = "prefix"  # <prefix><topic> (the Go mirror maker's --prefix)
    SOURCE_ALIAS = "source-alias"  # <source><separator><topic> (MM2's DefaultReplicationPolicy)


class StartPosition(StrEnum):
    """Where a flow starts a source partition that has no committed offset yet."""

    EARLIEST = "earliest"  # the whole history the source still holds
    LATEST = "latest"  # only what is written from now on


class TakeOver(StrEnum):
    """Whose position a flow takes over for a source partition it never committed: the
    MirrorMaker it replaces, so that nothing is copied twice and nothing skipped."""

    NONE = "none"  # start by START_FROM
    # MirrorMaker 1's committed offsets: the flow's consumer group (GROUP_ID) on the source.
    MIRRORMAKER1 = "mirrormaker1"
    # MirrorMaker 2's source offsets: its Connect offsets topic on the target.
    MIRRORMAKER2 = "mirrormaker2"


def is_host_port(entry: str) -> bool:
    """``entry`` is one bootstrap address, ``host:port`` (no credentials, no scheme)."""
    return _HOST_PORT.match(entry) is not None


def shown_servers(entries: list[str]) -> list[str]:
    """Bootstrap entries as a message may show them: never a credential.

    Credentials written into an entry become ``***`` (``user:secret@host:9092`` is shown
    ``***@host:9092``, ``sasl://user:pass@host`` ``sasl://***@host``). Once one entry holds
    credentials or text no address holds (``;password=...``), no other entry is shown but as
    ``***`` either: a password may hold a comma, and the entries next to it be parts of it.
    """

    def parts(entry: str) -> tuple[str, str]:
        scheme = _SCHEME.match(entry)
        head = scheme.group(0) if scheme else ""
        return head, entry[len(head) :]

    suspicious = any(
        "@" in rest or not _ADDRESS_TEXT.match(rest) for _, rest in map(parts, entries)
    )
    shown = []
    for head, rest in map(parts, entries):
        if "@" in rest:
            host = rest.rpartition("@")[2]
            shown.append(f"{head}***@{host if _ADDRESS_TEXT.match(host) else '***'}")
        elif suspicious:
            shown.append("***")
        else:
            shown.append(head + rest)
    return shown


def shown_value(value: object) -> str | None:
    """``value`` quoted for a message, or ``None`` when it must not be shown (it may hold a
    credential: an ``@``, or words like password, secret or token)."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        return None
    text = str(value)
    return None if _SECRET_HINT.search(text) else repr(value)


def _readable_file(path: Path | None) -> Path | None:
    if path is not None and not (path.is_file() and os.access(path, os.R_OK)):
        raise ValueError("file does not exist or is not readable")
    return path


ReadableFile = Annotated[Path | None, AfterValidator(_readable_file)]


def split_outside(text: str, separator: str, opening: str, closing: str) -> list[str]:
    """``text`` split at each ``separator`` that is neither escaped, inside ``[...]``, nor
    inside ``opening``...``closing`` (nested); the parts as written."""
    parts: list[str] = []
    current: list[str] = []
    depth, in_class, escaped = 0, False, False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == opening:
            depth += 1
        elif char == closing and depth:
            depth -= 1
        elif char == separator and not depth:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def topic_regex(text: str) -> str:
    """A topic rule as users write it, as one regex: MirrorMaker's comma lists mean ``|``.

    ``orders, payments`` becomes ``orders|payments``, like MirrorMaker's whitelists: a comma
    outside ``[...]`` and ``{m,n}`` separates alternatives (topic names cannot hold commas),
    blanks around it are dropped, and so are quotes around the whole rule (topic names cannot
    hold those either). Anything else is kept as written; the rule is matched against the whole
    topic name, so ``^orders$`` and ``orders`` mean the same.
    """
    text = text.strip().strip("\"'").strip()
    parts = [part.strip() for part in split_outside(text, ",", "{", "}")]
    return "|".join(part for part in parts if part)


def _compile(pattern: str) -> str:
    pattern = topic_regex(pattern)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    return pattern


Regex = Annotated[str, AfterValidator(_compile)]


def bootstrap_problem(servers: list[str]) -> str:
    """What is wrong with bootstrap entries of which some are not ``host:port``, showing the bad
    ones through :func:`shown_servers` (never a credential)."""
    shown = shown_servers(servers)
    bad = [text for server, text in zip(servers, shown, strict=True) if not is_host_port(server)]
    message = f"expected host:port[,host:port...]; not host:port: {', '.join(bad)}"
    if any("@" in server for server in servers):
        message += (
            " (credentials never go into the address: give them in the cluster's SASL_USERNAME "
            "and SASL_PASSWORD, with SECURITY_PROTOCOL=SASL_SSL)"
        )
    elif any(":" not in server for server in servers):
        message += " (a ':' missing before the port?)"
    return message
