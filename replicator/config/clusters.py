"""Clusters and flows: how to reach each datacenter's cluster, and what each flow copies.

:class:`ClusterSettings` is one ``REPLICATOR_CLUSTERS__<ALIAS>__*`` block: the bootstrap servers
(``host:port`` only: credentials typed into an address are refused and never shown), the security
protocol and its credentials, TLS files. :class:`FlowSettings` is one
``REPLICATOR_FLOWS__<NAME>__*`` block: a MirrorMaker-style copy from a source cluster to a target
under a naming policy. Each block is checked on its own here; what needs the whole configuration
(a flow's clusters exist, SASL settings match the protocol) is checked by
:class:`~replicator.config.settings.Settings`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from replicator.config.values import (
    DEFAULT_TOPICS_EXCLUDE,
    AclPolicy,
    Naming,
    ReadableFile,
    Regex,
    SaslMechanism,
    SecurityProtocol,
    StartPosition,
    TakeOver,
    bootstrap_problem,
    is_host_port,
)


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
    sasl_password_file: ReadableFile = Field(
        None,
        description="A file holding the SASL password instead, e.g. a mounted secret "
        "(/run/secrets/<name>, a Kubernetes Secret volume): read once at start, one trailing "
        "newline dropped; not with SASL_PASSWORD.",
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
    acl_sync: AclPolicy = Field(
        AclPolicy.OFF,
        description="The source's topic ACLs kept on the target every "
        "REPLICATOR_ACL_SYNC_INTERVAL_MS: mm2 (MirrorMaker 2's sync.topic.acls: literal "
        "bindings renamed, ALLOW Write left out, ALLOW All becomes Read, the default of "
        "`replicator mm2`), movable (identity naming only: every binding on a replicated "
        "topic, literal or prefixed, the same on the target), off. A binding the sync did not "
        "create is never removed.",
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
