"""Settings: the only reader of the environment.

Everything the replicator can be told comes from ``REPLICATOR_*`` environment variables, parsed
once, before the event loop starts, into a frozen :class:`Settings` that is passed down. Invalid
configuration raises :class:`~replicator.errors.ConfigError` naming the variable at fault; the CLI
turns that into exit status 2. Secret values are ``SecretStr`` and never appear in messages, nor do
credentials typed into another value (``user:secret@host:9092`` as a bootstrap server): messages
show values through :func:`shown_servers` and :func:`shown_value`. The replicator's own topics
(heartbeats, checkpoints, dead letters) must not be application topics
(:func:`replicator.config.topology.internal_topic_problem` decides), and SASL PLAIN without TLS is
refused unless the cluster's ``ALLOW_INSECURE_PLAIN`` accepts it; SASL settings with a protocol
that uses no SASL are refused. A message says the offending value once (never a secret). An
unknown ``REPLICATOR_*`` variable is refused as a typo, except the ones the kubelet injects for
a Service named ``replicator`` (:func:`is_service_link`), which are ignored and remembered by name
(:attr:`Settings.service_links`).
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from replicator.errors import ConfigError

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

# A cluster's SASL settings: all required with a SASL_* protocol, none allowed without one.
_SASL_FIELDS = ("sasl_mechanism", "sasl_username", "sasl_password")
# The settings naming the replicator's own topics (never application data), in message order.
INTERNAL_TOPIC_FIELDS = ("heartbeat_topic", "checkpoints_topic", "dead_letter_topic")

_ALIAS = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
# No '@' or '/': a host name holds neither, and credentials written into an address
# (user:secret@host:9092, sasl://user:pass@host) would be shown wherever the address is.
_HOST_PORT = re.compile(r"^[^\s:,@/]+:\d{1,5}$")
# What a host:port, or a typo of one, is made of: only such text is shown back in a message.
_ADDRESS_TEXT = re.compile(r"^[A-Za-z0-9._\-\[\]:]*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9_+.-]*://")
# A value that may hold a secret is never echoed in a message.
_SECRET_HINT = re.compile(r"@|pass|secret|token|credential|api.?key", re.IGNORECASE)
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


_FLOW_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")


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


class OffsetResetPolicy(StrEnum):
    """What a leg does when its source position is no longer in the log."""

    EARLIEST = "earliest"  # resume at the oldest record still held, counting what was lost
    HALT = "halt"  # stop that partition on that leg and report it


class OversizePolicy(StrEnum):
    """What a leg does with a record too large for the destination topic."""

    HALT = "halt"  # stop that partition on that leg and report it
    DEAD_LETTER = "dead-letter"  # park it in the local dead-letter topic and continue


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


class ClusterSettings(BaseModel):
    """Connection settings of one datacenter's Kafka cluster, with its own credentials."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(description="host:port[,host:port...] of the cluster.")
    security_protocol: SecurityProtocol = Field(
        SecurityProtocol.PLAINTEXT, description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."
    )
    sasl_mechanism: SaslMechanism | None = Field(
        None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* protocols)."
    )
    sasl_username: str | None = Field(None, description="SASL principal for this cluster.")
    sasl_password: SecretStr | None = Field(
        None, description="SASL password for this cluster (secret: never logged or shown)."
    )
    ssl_cafile: ReadableFile = Field(None, description="CA bundle to verify the brokers.")
    ssl_certfile: ReadableFile = Field(None, description="Client certificate (mutual TLS).")
    ssl_keyfile: ReadableFile = Field(None, description="Client private key (mutual TLS).")
    topic_alias: str | None = Field(
        None,
        description="The cluster's name in topic names a source-alias flow writes "
        "(<name><separator><topic>, as MM2 names them); default: its alias.",
    )

    allow_insecure_plain: bool = Field(
        False,
        description="Accept SASL_MECHANISM=PLAIN over SECURITY_PROTOCOL=SASL_PLAINTEXT, which "
        "sends the password unencrypted (refused otherwise: use SASL_SSL, or SCRAM).",
    )

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_ports(cls, value: str) -> str:
        servers = [s.strip() for s in value.split(",") if s.strip()]
        if not servers:
            raise ValueError("must list at least one host:port")
        if not all(map(is_host_port, servers)):
            raise ValueError(bootstrap_problem(servers))
        return ",".join(servers)

    @property
    def servers(self) -> list[str]:
        return self.bootstrap_servers.split(",")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in (
            SecurityProtocol.SASL_PLAINTEXT,
            SecurityProtocol.SASL_SSL,
        )

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sends_password_in_clear(self) -> bool:
        """SASL PLAIN without TLS: the password crosses the network as written."""
        return (
            self.sasl_mechanism is SaslMechanism.PLAIN
            and self.security_protocol is SecurityProtocol.SASL_PLAINTEXT
        )


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


class FlowSettings(BaseModel):
    """One MirrorMaker-style flow: the topics of ``source`` that pass its rules, copied to
    ``target`` under a naming policy. Only records that originated in the source cluster are
    copied under the same name; see ``provenance.py`` for the rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="Alias of the cluster the flow reads.")
    target: str = Field(description="Alias of the cluster the flow writes.")
    naming: Naming = Field(
        Naming.IDENTITY,
        description="identity, prefix (<prefix><topic>) or source-alias "
        "(<source><separator><topic>, MM2's default policy).",
    )
    prefix: str = Field("", description="The prefix of the prefix naming policy.")
    separator: str = Field(".", description="The separator of the source-alias naming policy.")
    topics_include: Regex = Field(
        ".*", description="Regex over source topic names to copy (whole name; comma means |)."
    )
    topics_exclude: Regex = Field(
        DEFAULT_TOPICS_EXCLUDE,
        description="Regex over source topic names never copied (whole name; comma means |).",
    )
    group_id: str | None = Field(
        None,
        description="The flow's consumer group on the source (default <group prefix>.<flow>); "
        "its committed offsets are per target under <group>.<source>.<target>.",
    )
    start_from: StartPosition = Field(
        StartPosition.EARLIEST,
        description="Where a partition with no committed offset starts: earliest (the whole "
        "history) or latest (only new records).",
    )
    take_over: TakeOver = Field(
        TakeOver.NONE,
        description="A partition with no committed offset of the flow starts where the "
        "MirrorMaker it replaces stopped: mirrormaker1 (the offsets committed under GROUP_ID "
        "on the source), mirrormaker2 (the source offsets in its Connect offsets topic on the "
        "target, TAKE_OVER_TOPIC), none; confirmed against what the target holds. Where "
        "MirrorMaker left no position, START_FROM applies.",
    )
    take_over_topic: str | None = Field(
        None,
        description="With TAKE_OVER=mirrormaker2: MirrorMaker 2's offsets topic on the target "
        "(default mm2-offsets.<source>.internal).",
    )
    replication_factor: int | None = Field(
        None, ge=1, description="Replication factor of topics created on the target."
    )
    preserve_partitions: bool = Field(
        True,
        description="Write each record to the partition number it had (the target topic needs at "
        "least as many partitions). false: place records by key as a Kafka producer does "
        "(keyless ones spread), into any partition count; per-key order holds.",
    )
    heartbeats: bool = Field(
        True,
        description="Emit heartbeats into the source's heartbeat topic and watch them arrive "
        "(REPLICATOR_HEARTBEAT_INTERVAL_MS); with REPLICATOR_HEARTBEAT_PLACEMENT=mirrormaker2, "
        "into the target's, and the source's heartbeat topics are copied even when false (as "
        "MirrorMaker 2 does).",
    )
    reverse_heartbeats: bool = Field(
        False,
        description="With REPLICATOR_HEARTBEAT_PLACEMENT=mirrormaker2: also emit the reverse "
        "direction's heartbeats into the source (as MirrorMaker 2's herder of a direction no "
        "flow runs does), so the flow copies them and its path is proven end to end.",
    )

    @field_validator("source", "target")
    @classmethod
    def _alias(cls, value: str) -> str:
        return value.strip().lower()


class Settings(BaseSettings):
    """The whole configuration of one replicator (one sidecar beside one cluster)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED_DELIMITER,
        case_sensitive=False,
        frozen=True,
        extra="forbid",
    )

    local_cluster: str = Field(description="Alias of the cluster this sidecar runs beside.")
    clusters: dict[str, ClusterSettings] = Field(
        description="One block per datacenter (local included), keyed by alias."
    )
    replica_mode: bool = Field(
        True,
        description="Replicate the local cluster's <topic>_REPLICA topics to <topic> on every "
        "cluster. false: run only the flows.",
    )
    flows: dict[str, FlowSettings] = Field(
        default_factory=dict,
        description="MirrorMaker-style flows (one block per flow, keyed by its name).",
    )
    topics_include: Regex = Field(
        ".*",
        description="Regex over real topic names to replicate (whole name; a comma means |).",
    )
    topics_exclude: Regex = Field(
        DEFAULT_TOPICS_EXCLUDE,
        description="Regex over real topic names never replicated (whole name; comma means |).",
    )
    replica_suffix: str = Field("_REPLICA", description="Suffix of the topics applications write.")
    group_prefix: str = Field(
        "replicator",
        description="Consumer groups: <prefix>.<source> (shared fetch), "
        "<prefix>.<source>.<destination> (each leg's committed offsets).",
    )
    http_host: str = Field("0.0.0.0", description="Address of the health and metrics server.")
    http_port: int = Field(8080, ge=0, le=65535, description="Port of health and metrics.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="DEBUG, INFO, WARNING or ERROR (any case)."
    )
    log_format: Literal["json", "console", "auto"] = Field(
        "auto",
        description="json, console, or auto (console on a terminal, JSON otherwise); any case.",
    )
    batch_max_bytes: int = Field(
        512 * 1024, ge=1024, description="Largest batch written to a destination partition."
    )
    linger_ms: int = Field(5, ge=0, description="How long a destination batch may wait to fill.")
    idempotence: bool = Field(
        True,
        description="Ask each destination for an idempotent producer (retries deduplicated by "
        "the broker). Where a destination refuses one, or with false, a batch whose outcome is "
        "unknown is not retried: its partition resumes from the destination's tail.",
    )
    compression: Compression = Field(
        Compression.NONE, description="Destination batches: none, gzip, snappy, lz4 or zstd."
    )
    fetch_max_bytes: int = Field(2 * 1024 * 1024, ge=1024, description="Largest fetch response.")
    fetch_max_wait_ms: int = Field(
        20, ge=0, description="Longest a fetch waits for data: bounds added latency when idle."
    )
    fetch_idle_max_wait_ms: int = Field(
        1000,
        ge=0,
        description="Longest the shared fetch waits for data once the source has been idle a "
        "while (it grows from REPLICATOR_FETCH_MAX_WAIT_MS while fetches come back empty, and "
        "falls back at the first record): an idle fetch of every assigned partition costs CPU "
        "in proportion to them, so it grows further to 2 ms per assigned partition (10 s at most, "
        "half REPLICATOR_REQUEST_TIMEOUT_MS). Brokers that answer as soon as data arrives (Apache "
        "Kafka) add no latency; set it to REPLICATOR_FETCH_MAX_WAIT_MS to keep the wait fixed.",
    )
    max_partition_fetch_bytes: int = Field(
        512 * 1024, ge=1024, description="Largest fetch per source partition."
    )
    partition_queue_max_records: int = Field(
        # With small records the byte bound below decides; a record bound lower than a whole
        # fetch of one partition made the feed pause after every fetch (measured: 0.77x -> 0.87x
        # of the batch-copy ceiling at 100 B when raised from 5,000, peak memory unchanged).
        20_000,
        ge=1,
        description="Records queued per source partition and leg before fetching pauses.",
    )
    partition_queue_max_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Bytes queued per source partition and leg before fetching pauses.",
    )
    detach_after_ms: int = Field(
        2000,
        ge=0,
        description="How long the shared fetch waits for a full leg before it fetches alone.",
    )
    commit_interval_ms: int = Field(
        1000, ge=10, description="How often acknowledged offsets are committed."
    )
    metadata_max_age_ms: int = Field(
        3000,
        ge=100,
        description="Metadata refresh: bounds how fast new topics are picked up. Each refresh of "
        "the shared fetch lists the whole source cluster, so a cluster of many partitions is "
        "listed at most every 5 ms per partition in it (30 s at 6,000).",
    )
    request_timeout_ms: int = Field(
        30_000, ge=1000, description="Kafka request timeout; must exceed a consumer group join."
    )
    probe_timeout_ms: int = Field(
        3_000,
        ge=100,
        description="How long a cluster has to answer the health probe (every 5 s) before it "
        "counts as unreachable and its legs not ready: a link that drops packets without "
        "refusing the connection is seen within this, not within REPLICATOR_REQUEST_TIMEOUT_MS.",
    )
    send_stall_timeout_ms: int = Field(
        30_000,
        ge=100,
        description="An unacknowledged batch older than this marks its leg not ready.",
    )
    shutdown_grace_ms: int = Field(
        20_000,
        ge=0,
        description="A stop (SIGTERM) ends within this: draining in-flight sends, committing, "
        "saving marks and closing clients share one deadline (the drain keeps a quarter of it, "
        "at most 5 s, for the rest). A rebalance's drain may take all of it. Give the "
        "orchestrator a few seconds more (terminationGracePeriodSeconds, docker stop -t).",
    )
    offset_reset_policy: OffsetResetPolicy = Field(
        OffsetResetPolicy.EARLIEST,
        description="Source offset no longer in the log (retention, recreated topic): earliest "
        "resumes at the oldest record held and counts the loss; halt stops the partition.",
    )
    record_too_large_policy: OversizePolicy = Field(
        OversizePolicy.HALT,
        description="Record larger than the destination topic allows: halt stops the partition; "
        "dead-letter parks it in the local dead-letter topic and continues.",
    )
    dead_letter_topic: str = Field(
        "replicator.dead-letter",
        description="Topic on the local cluster for records parked by the dead-letter policy; "
        "never an application topic (one the topic rules replicate or replicate into: exit 2).",
    )
    heartbeat_interval_ms: int = Field(
        1000,
        ge=0,
        description="How often each flow writes a heartbeat into its source's heartbeat topic "
        "(copied to the target like any topic, so its age and delay prove the whole path); "
        "0: no heartbeats.",
    )
    heartbeat_placement: HeartbeatPlacement = Field(
        HeartbeatPlacement.SOURCE,
        description="source: each flow writes into its source's heartbeat topic and copies it "
        "under its naming; mirrormaker2: as MirrorMaker 2, into the target's heartbeat topic "
        "(and, REVERSE_HEARTBEATS, the source's), the copy named <source>.heartbeats under "
        "every naming policy.",
    )
    heartbeat_topic: str = Field(
        "heartbeats",
        description="The heartbeat topic of each flow's source cluster; never an application "
        "topic (one the topic rules replicate or replicate into: exit 2).",
    )
    sync_groups: Regex | None = Field(
        None,
        description="Regex over consumer group names of the local cluster (whole name) whose "
        "positions are translated into every other cluster on an interval and kept there as "
        "checkpoints, for failover; unset: off.",
    )
    sync_groups_interval_ms: int = Field(
        60_000,
        ge=1_000,
        description="How often the groups of REPLICATOR_SYNC_GROUPS are translated.",
    )
    sync_group_offsets: bool = Field(
        False,
        description="Also commit the translated positions in the other clusters, for groups with "
        "no active member there; never moves a group backwards.",
    )
    mm2_checkpoints: bool = Field(
        False,
        description="Also write each checkpoint as MirrorMaker 2 does, into "
        "<source>.checkpoints.internal of the target (the source's TOPIC_ALIAS and the flow's "
        "separator) in MM2's format, so MirrorClient.remoteConsumerOffsets and "
        "RemoteClusterUtils.translateOffsets read the translated positions.",
    )
    checkpoints_topic: str = Field(
        "replicator-checkpoints",
        description="The topic, in each cluster, holding the latest translated position of each "
        "synced group, partition and source cluster (compacted, never replicated); never an "
        "application topic (one the topic rules replicate or replicate into: exit 2).",
    )
    topic_config_sync_interval_ms: int = Field(
        60_000,
        ge=0,
        description="How often destination topics' configs follow their source's (0: only at "
        "creation), as REPLICATOR_TOPIC_CONFIG_SYNC says.",
    )
    topic_config_sync: ConfigSync = Field(
        ConfigSync.RAISE_ONLY,
        description="raise-only: limits (retention, max.message.bytes) only ever raised, a "
        "destination's own overrides kept; mirror: every copied config follows the source, "
        "down too, and a source default removes the destination's override (MirrorMaker 2's "
        "sync, the default of `replicator mm2`).",
    )
    topic_config_defaults_from: DefaultsFrom = Field(
        DefaultsFrom.TARGET,
        description="With REPLICATOR_TOPIC_CONFIG_SYNC=mirror, a config at its default on the "
        "source: target removes the destination's override (its own default applies), source "
        "sets the source's value; MM2's use.defaults.from.",
    )
    topic_configs_exclude: Regex = Field(
        DEFAULT_TOPIC_CONFIGS_EXCLUDE,
        description="Regex over topic config names never copied or synced (whole name; comma "
        "means |); MM2's config.properties.exclude.",
    )
    destination_replication_factor: int | None = Field(
        None, ge=1, description="Replication factor of created topics (default: the source's)."
    )

    # The Kubernetes service link variables load_settings found and ignored (names only), for
    # one debug line once logging is set up; not a setting.
    _service_links: tuple[str, ...] = PrivateAttr(default=())

    def model_post_init(self, context: Any, /) -> None:
        # Built by load_settings: the environment it reads is at hand (empty otherwise).
        environ = _ENVIRON.get({})
        self._service_links = tuple(
            sorted(name for name, value in environ.items() if is_service_link(name, value))
        )

    @property
    def service_links(self) -> tuple[str, ...]:
        """The Kubernetes service link variables ignored when these settings were loaded."""
        return self._service_links

    @property
    def fetch_longest_wait_ms(self) -> int:
        """Longest an idle fetch of many partitions waits (2 ms per partition it names, see
        :class:`replicator.lifecycle.IdleWait`): 10 s, and half the request timeout at most."""
        return min(10_000, self.request_timeout_ms // 2)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _MappingEnvSource(settings_cls))

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, value: object, info: ValidationInfo) -> object:
        """``debug`` is ``DEBUG``, ``JSON`` is ``json``: a word of a closed list, in any case.
        Anything else is refused here, so the message shows the value as it was written."""
        if not isinstance(value, str):
            return value
        field = cls.model_fields[info.field_name or ""]
        allowed: tuple[str, ...] = get_args(field.annotation)
        for word in allowed:
            if value.strip().lower() == word.lower():
                return word
        *head, last = allowed
        raise ValueError(f"must be {', '.join(head)} or {last}, in any case")

    @field_validator("local_cluster")
    @classmethod
    def _normalise_alias(cls, value: str) -> str:
        value = value.strip().lower()
        if not _ALIAS.match(value):
            raise ValueError("must be a cluster alias: lower-case letters, digits and '-'")
        return value

    @field_validator("clusters")
    @classmethod
    def _aliases(cls, value: dict[str, ClusterSettings]) -> dict[str, ClusterSettings]:
        bad = [alias for alias in value if not _ALIAS.match(alias)]
        if bad:
            # Named by a variable of its block: REPLICATOR_CLUSTERS alone is no variable to fix.
            raise ConfigError(
                f"{ENV_PREFIX}CLUSTERS{NESTED_DELIMITER}{bad[0].upper()}{NESTED_DELIMITER}"
                "BOOTSTRAP_SERVERS",
                f"{bad[0]!r} is not a cluster alias: lower-case letters, digits and '-' "
                "(the alias is the part between CLUSTERS__ and the next __)",
            )
        if not value:
            raise ValueError("at least one cluster must be configured")
        return value

    @field_validator("replica_suffix")
    @classmethod
    def _suffix(cls, value: str) -> str:
        # An empty suffix would make every real topic a source: the replicator would read its own
        # output and mirror it forever.
        if not value or value != value.strip():
            raise ValueError("must be a non-empty suffix without surrounding spaces")
        return value

    @model_validator(mode="after")
    def _topology(self) -> Settings:
        if self.local_cluster not in self.clusters:
            known = ", ".join(sorted(self.clusters)) or "none"
            raise ConfigError(
                f"{ENV_PREFIX}LOCAL_CLUSTER",
                f"no cluster named {self.local_cluster!r} is configured (known: {known}); "
                f"define {ENV_PREFIX}CLUSTERS__{self.local_cluster.upper()}__BOOTSTRAP_SERVERS",
            )
        for alias, cluster in self.clusters.items():
            var = f"{ENV_PREFIX}CLUSTERS__{alias.upper()}__"
            given = [f for f in _SASL_FIELDS if getattr(cluster, f) is not None]
            if given and not cluster.uses_sasl:
                # Credentials the protocol never sends: the operator meant SASL and would get an
                # unauthenticated connection, refused by the broker in a way that says little.
                protocol = var + "SECURITY_PROTOCOL"
                how = "" if "security_protocol" in cluster.model_fields_set else " (the default)"
                raise ConfigError(
                    var + given[0].upper(),
                    f"given with {protocol}={cluster.security_protocol}{how}, which does not use "
                    f"SASL: set {protocol}=SASL_SSL (or SASL_PLAINTEXT), or remove "
                    + " and ".join(var + f.upper() for f in given),
                )
            if cluster.uses_sasl:
                for field in _SASL_FIELDS:
                    if getattr(cluster, field) is None:
                        raise ConfigError(
                            var + field.upper(),
                            f"required with security protocol {cluster.security_protocol}",
                        )
            if (cluster.ssl_certfile is None) != (cluster.ssl_keyfile is None):
                raise ConfigError(
                    var + "SSL_KEYFILE", "SSL_CERTFILE and SSL_KEYFILE must be given together"
                )
            if cluster.sends_password_in_clear and not cluster.allow_insecure_plain:
                raise ConfigError(
                    var + "SASL_MECHANISM",
                    "PLAIN with security protocol SASL_PLAINTEXT (no TLS) sends the password "
                    "unencrypted over the network: use SASL_SSL, or SCRAM-SHA-256/SCRAM-SHA-512; "
                    f"to accept it anyway, set {var}ALLOW_INSECURE_PLAIN=true",
                )
        return self

    @model_validator(mode="after")
    def _flows(self) -> Settings:
        for name, flow in self.flows.items():
            var = f"{ENV_PREFIX}FLOWS__{name.upper()}__"
            if not _FLOW_NAME.match(name):
                raise ConfigError(
                    var + "SOURCE", "a flow name is lower-case letters, digits, '-' and '_'"
                )
            for end in ("source", "target"):
                alias = getattr(flow, end)
                if alias not in self.clusters:
                    known = ", ".join(sorted(self.clusters))
                    raise ConfigError(
                        var + end.upper(), f"no cluster named {alias!r} (known: {known})"
                    )
            if flow.naming is Naming.PREFIX and not flow.prefix:
                raise ConfigError(var + "PREFIX", "required by the prefix naming policy")
            if flow.naming is Naming.SOURCE_ALIAS and not flow.separator:
                raise ConfigError(var + "SEPARATOR", "must not be empty")
            if flow.source == flow.target and flow.naming is Naming.IDENTITY:
                raise ConfigError(
                    var + "TARGET",
                    "an identity flow into its own source cluster would copy every topic onto "
                    "itself; give another target or a renaming policy",
                )
        if not self.replica_mode and not self.flows:
            raise ConfigError(
                f"{ENV_PREFIX}REPLICA_MODE",
                f"is false and no flow is configured ({ENV_PREFIX}FLOWS__<NAME>__SOURCE ...): "
                "nothing would be replicated",
            )
        return self

    @model_validator(mode="after")
    def _internal_topics(self) -> Settings:
        """The replicator's own topics: Kafka topic names, distinct, never replica topics, and
        never topics the rules replicate (after the clusters and flows are known good)."""
        seen: dict[str, str] = {}
        for field_name in INTERNAL_TOPIC_FIELDS:
            variable, topic = ENV_PREFIX + field_name.upper(), getattr(self, field_name)
            if not _TOPIC_NAME.match(topic) or topic in (".", ".."):
                shown = shown_value(topic)
                raise ConfigError(
                    variable,
                    "must be a Kafka topic name: letters, digits, '.', '_' and '-'"
                    + (f" (got {shown})" if shown is not None else ""),
                )
            if topic in seen:
                # Blame the one moved from its default: the other is where it belongs.
                other = seen[topic]
                if topic == type(self).model_fields[field_name].default:
                    variable, other = other, variable
                raise ConfigError(variable, f"{topic!r} is {other}'s topic: give each its own")
            seen[topic] = variable
            # Applications write <topic><suffix>; the _REPLICA mode reads every such topic.
            if topic.endswith(self.replica_suffix):
                raise ConfigError(
                    variable,
                    f"must not end in the replica suffix {self.replica_suffix!r}: applications "
                    "write such topics and the replicator reads them as application data",
                )
        # The topic rules live in topology, which imports this module.
        from replicator.config.topology import internal_topic_problem

        problem = internal_topic_problem(self)
        if problem is not None:
            raise ConfigError(*problem)
        return self

    @property
    def remote_clusters(self) -> list[str]:
        return sorted(alias for alias in self.clusters if alias != self.local_cluster)

    def masked(self) -> dict[str, Any]:
        """The effective configuration as plain data, with every secret masked."""
        return self.model_dump(mode="json")


_ENVIRON: ContextVar[Mapping[str, str]] = ContextVar("replicator_environ")


class _MappingEnvSource(EnvSettingsSource):
    """Reads the environment handed to :func:`load_settings` instead of ``os.environ``."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ: Mapping[str, str] = _ENVIRON.get(os.environ)
        return parse_env_vars(
            environ,
            self.case_sensitive,
            self.env_ignore_empty,
            self.env_parse_none_str,
        )


def env_name(loc: tuple[int | str, ...]) -> str:
    """The environment variable that a validation error location refers to."""
    return ENV_PREFIX + NESTED_DELIMITER.join(str(part).upper() for part in loc)


# The variables the kubelet injects into every pod of a namespace holding a Service named
# ``replicator`` (unless the pod says enableServiceLinks: false), in its documented format:
# {SVCNAME}_SERVICE_HOST, {SVCNAME}_SERVICE_PORT, {SVCNAME}_SERVICE_PORT_{PORTNAME} (the port's
# name, upper-cased, '-' as '_'), {SVCNAME}_PORT, {SVCNAME}_PORT_{PORT}_{PROTOCOL} and that
# followed by _PROTO, _PORT or _ADDR. Exactly these names, as the kubelet writes them (upper
# case): no setting is named so, and any other unknown REPLICATOR_* variable is still a typo.
# The value must have the kubelet's shape too, so that a typo such as REPLICATOR_PORT=9090 (for
# REPLICATOR_HTTP_PORT) is still refused rather than ignored.
_SERVICE_LINK = re.compile(
    rf"^{ENV_PREFIX}(?:(?P<host>SERVICE_HOST)|(?P<port>SERVICE_PORT(?:_[A-Z0-9_]+)?)|(?P<url>PORT)"
    r"|PORT_\d{1,5}_(?:TCP|UDP|SCTP)(?:(?P<proto>_PROTO)|(?P<port_of>_PORT)|(?P<addr>_ADDR)|(?P<url_of>)))$"
)
_LINK_URL = re.compile(r"^(?:tcp|udp|sctp)://(?P<ip>\[[0-9a-fA-F:.]+\]|[0-9.]+):\d{1,5}$")


def is_service_link(name: str, value: str) -> bool:
    """``name=value`` is a variable the kubelet injects for a Service named ``replicator``: one
    of its names, with a value of its shape (an address, a port, a protocol, a URL of them)."""
    match = _SERVICE_LINK.match(name)
    if match is None:
        return False
    kind = match.lastgroup
    if kind in ("host", "addr"):
        return _is_ip(value)
    if kind in ("port", "port_of"):
        return value.isdigit() and 0 < int(value) < 65536
    if kind == "proto":
        return value in ("tcp", "udp", "sctp")
    url = _LINK_URL.match(value)
    return url is not None and _is_ip(url["ip"].strip("[]"))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``REPLICATOR_*`` variables that name no setting: almost always a typo (Kubernetes'
    service link variables aside: :func:`is_service_link`)."""
    top = {name.upper() for name in Settings.model_fields}
    cluster_fields = {name.upper() for name in ClusterSettings.model_fields}
    flow_fields = {name.upper() for name in FlowSettings.model_fields}
    unknown = []
    for key in environ:
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or is_service_link(key, environ[key]):
            continue
        parts = upper[len(ENV_PREFIX) :].split(NESTED_DELIMITER)
        if parts[0] == "CLUSTERS":
            if len(parts) != 3 or parts[2] not in cluster_fields:
                unknown.append(key)
        elif parts[0] == "FLOWS":
            if len(parts) != 3 or parts[2] not in flow_fields:
                unknown.append(key)
        elif len(parts) != 1 or parts[0] not in top:
            unknown.append(key)
    return sorted(unknown)


# Values never quoted in an error: secrets, and bootstrap servers (their validator shows the bad
# entries, credentials masked).
_UNQUOTED_FIELDS = {"sasl_password", "bootstrap_servers"}


def _unknown_setting(name: str) -> str:
    """Why ``name`` is refused, with the setting it most likely meant (a typo is the usual cause:
    ``REPLICATOR_PORT`` for ``REPLICATOR_HTTP_PORT``, ``..._LOG_LEVLE``)."""
    upper = name.upper()[len(ENV_PREFIX) :]
    head, _, field_name = upper.rpartition(NESTED_DELIMITER)
    if head.startswith(("CLUSTERS", "FLOWS")) and head.count(NESTED_DELIMITER) == 1:
        model = ClusterSettings if head.startswith("CLUSTERS") else FlowSettings
        fields = list(model.model_fields)
        prefix, wrong = f"{ENV_PREFIX}{head}{NESTED_DELIMITER}", field_name
    else:
        nested = {"clusters", "flows"}  # set as CLUSTERS__<ALIAS>__..., never alone
        fields = [f for f in Settings.model_fields if f not in nested]
        prefix, wrong = ENV_PREFIX, upper
    close = difflib.get_close_matches(wrong, [f.upper() for f in fields], n=1, cutoff=0.6)
    meant = f"; did you mean {prefix}{close[0]}?" if close else ""
    return f"unknown setting (check the spelling{meant})"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build and validate the settings from an environment (``os.environ`` by default)."""
    env = dict(os.environ if environ is None else environ)
    unknown = _unknown_variables(env)
    if unknown:
        raise ConfigError(unknown[0], _unknown_setting(unknown[0]))
    token = _ENVIRON.set(env)
    try:
        return Settings()  # type: ignore[call-arg]
    except ValidationError as exc:
        raise _config_error(exc) from None
    finally:
        _ENVIRON.reset(token)


def _config_error(exc: ValidationError) -> ConfigError:
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = tuple(err["loc"])
    ctx = err.get("ctx") or {}
    inner = ctx.get("error")
    if isinstance(inner, ConfigError):
        return inner
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing" and loc == ("clusters",):
        return ConfigError(
            f"{ENV_PREFIX}CLUSTERS__<ALIAS>__BOOTSTRAP_SERVERS",
            "no cluster is configured; define one block per datacenter",
        )
    if loc and str(loc[-1]) not in _UNQUOTED_FIELDS and err["type"] != "missing":
        # The value once: a validator that quotes it already is not followed by it again.
        shown = shown_value(exc.errors(include_url=False)[0].get("input"))
        if shown is not None and shown not in message:
            message = f"{message} (got {shown})"
    return ConfigError(env_name(loc) if loc else ENV_PREFIX + "*", message)
