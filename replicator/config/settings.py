"""Settings: the whole configuration of one replicator, as one frozen model.

:class:`Settings` holds every ``REPLICATOR_*`` setting (one field each, described where it is
declared: the reference documentation is generated from these descriptions) and checks what needs
more than one value: the local cluster is configured, a cluster's SASL settings match its
protocol, SASL PLAIN without TLS is refused unless the cluster's ``ALLOW_INSECURE_PLAIN`` accepts
it, flows name known clusters and a usable naming, the replicator's own topics (heartbeats,
checkpoints, dead letters) are distinct Kafka topic names. A broken rule raises
:class:`~replicator.errors.ConfigError` naming the variable at fault, its message showing a value
at most once and never a secret.

The model reads nothing itself: :func:`replicator.config.loading.load_settings` builds it from the
environment. A component that reads only a few settings takes a narrow frozen view of them
(:mod:`replicator.config.views`), built by a method of the model, rather than the whole of it.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import Any, Literal, get_args

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from replicator.config.clusters import ClusterSettings, FlowSettings
from replicator.config.values import (
    ALIAS,
    DEFAULT_TOPIC_CONFIGS_EXCLUDE,
    DEFAULT_TOPICS_EXCLUDE,
    ENV_PREFIX,
    INTERNAL_TOPIC_FIELDS,
    NESTED_DELIMITER,
    AclPolicy,
    Compression,
    ConfigSync,
    DataPath,
    DefaultsFrom,
    HeartbeatPlacement,
    Naming,
    OffsetResetPolicy,
    OversizePolicy,
    Regex,
    shown_value,
)
from replicator.config.views import ClientTimings, DeadLetterSettings, ProducerTuning
from replicator.errors import ConfigError

__all__ = ["Settings"]

# A cluster's SASL settings: all required with a SASL_* protocol, none allowed without one.
_SASL_FIELDS = ("sasl_mechanism", "sasl_username", "sasl_password")
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_FLOW_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")
# The service link variables of the settings being built by Settings.from_values (none otherwise).
_SERVICE_LINKS: ContextVar[tuple[str, ...]] = ContextVar("replicator_service_links", default=())


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
    group_session_timeout_ms: int = Field(
        45_000,
        ge=1000,
        description="How long the source cluster keeps a replicator in a consumer group without "
        "a heartbeat (Kafka's own default): a replicator that crashed gives its partitions to "
        "the others after this; a lower value makes that sooner, but a replicator taking "
        "thousands of partitions over may miss heartbeats and be dropped (10 s did at 10,000).",
    )
    instance_id: str | None = Field(
        None,
        min_length=1,
        max_length=249,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="This replica's stable identity in its consumer groups (static membership, "
        "KIP-345): a replica restarted under the same id gets its partitions back at once instead "
        "of after the session. Default: the platform's HOSTNAME (a pod's name) when set. Unique "
        "per replica: a second process joining under the same id stops the first.",
    )
    data_path: DataPath = Field(
        DataPath.AUTO,
        description="How fetched records become destination batches: native (records stay "
        "bytes, built by the replicator's native extension), python (the reference path), or "
        "auto: native when the extension can be loaded, else python, said once in the log, "
        "/status and the replicator_data_path metric. native without the extension exits 2.",
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
    acl_sync: AclPolicy = Field(
        AclPolicy.OFF,
        description="The _REPLICA mode's ACL sync: movable (the bindings of the local cluster "
        "on each replicated <topic>_REPLICA and its <topic>, literal or prefixed, hosts kept, "
        "the same on every remote cluster, so an application can move between datacenters) "
        "or off. A binding the sync did not create is never removed.",
    )
    acl_sync_interval_ms: int = Field(
        60_000,
        ge=1_000,
        description="How often every ACL sync (this setting and each flow's ACL_SYNC) reads "
        "its source's topic ACLs and brings its target's to match.",
    )
    destination_replication_factor: int | None = Field(
        None, ge=1, description="Replication factor of created topics (default: the source's)."
    )

    # The Kubernetes service link variables load_settings found and ignored (names only), for
    # one debug line once logging is set up; not a setting.
    _service_links: tuple[str, ...] = PrivateAttr(default=())

    @classmethod
    def from_values(cls, values: dict[str, Any], service_links: tuple[str, ...] = ()) -> Settings:
        """The settings of ``values`` (as the loader read them from the environment), with the
        Kubernetes service link variables it ignored (names only)."""
        token = _SERVICE_LINKS.set(service_links)
        try:
            return cls(**values)
        finally:
            _SERVICE_LINKS.reset(token)

    def model_post_init(self, context: Any, /) -> None:
        self._service_links = _SERVICE_LINKS.get()

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
        # Only what the caller gives: the environment is read by the loader, never by the model.
        return (init_settings,)

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
        if not ALIAS.match(value):
            raise ValueError("must be a cluster alias: lower-case letters, digits and '-'")
        return value

    @field_validator("clusters")
    @classmethod
    def _aliases(cls, value: dict[str, ClusterSettings]) -> dict[str, ClusterSettings]:
        bad = [alias for alias in value if not ALIAS.match(alias)]
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
            # The variables as the operator set them: the password may have come from its file.
            named = {f: f.upper() for f in _SASL_FIELDS}
            if cluster.sasl_password_file is not None:
                named["sasl_password"] = "SASL_PASSWORD_FILE"
            given = [named[f] for f in _SASL_FIELDS if getattr(cluster, f) is not None]
            if given and not cluster.uses_sasl:
                # Credentials the protocol never sends: the operator meant SASL and would get an
                # unauthenticated connection, refused by the broker in a way that says little.
                protocol = var + "SECURITY_PROTOCOL"
                how = "" if "security_protocol" in cluster.model_fields_set else " (the default)"
                raise ConfigError(
                    var + given[0],
                    f"given with {protocol}={cluster.security_protocol}{how}, which does not use "
                    f"SASL: set {protocol}=SASL_SSL (or SASL_PLAINTEXT), or remove "
                    + " and ".join(var + name for name in given),
                )
            if cluster.uses_sasl:
                for field in _SASL_FIELDS:
                    if getattr(cluster, field) is None:
                        alternative = (
                            f" (or {var}SASL_PASSWORD_FILE)" if field.endswith("password") else ""
                        )
                        raise ConfigError(
                            var + field.upper(),
                            f"required with security protocol {cluster.security_protocol}"
                            + alternative,
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
            _check_naming(var, flow)
        if self.acl_sync is not AclPolicy.OFF and not self.replica_mode:
            raise ConfigError(
                f"{ENV_PREFIX}ACL_SYNC",
                f"is the _REPLICA mode's ACL sync, and {ENV_PREFIX}REPLICA_MODE is false: give "
                f"each flow its own ({ENV_PREFIX}FLOWS__<NAME>__ACL_SYNC)",
            )
        if self.acl_sync is AclPolicy.MM2:
            raise ConfigError(
                f"{ENV_PREFIX}ACL_SYNC",
                "the _REPLICA mode keeps names: movable or off (mm2 is a flow's policy)",
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
        """The replicator's own topics: Kafka topic names, distinct, never replica topics (that
        the rules never replicate them is checked by the loader, once the model is built:
        :func:`replicator.config.topology.internal_topic_problem`)."""
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
        return self

    @property
    def remote_clusters(self) -> list[str]:
        return sorted(alias for alias in self.clusters if alias != self.local_cluster)

    def masked(self) -> dict[str, Any]:
        """The effective configuration as plain data, with every secret masked."""
        return self.model_dump(mode="json")

    def client_timings(self) -> ClientTimings:
        """What every Kafka client is told besides its cluster's block."""
        return ClientTimings(
            self.request_timeout_ms, self.metadata_max_age_ms, self.probe_timeout_ms
        )

    def producer_tuning(self) -> ProducerTuning:
        """What a destination producer is told besides its cluster's block."""
        return ProducerTuning(
            self.request_timeout_ms,
            self.metadata_max_age_ms,
            self.probe_timeout_ms,
            self.batch_max_bytes,
            self.linger_ms,
            self.compression,
        )

    def dead_letters(self) -> DeadLetterSettings:
        """What the dead-letter writer needs: its topic, the local cluster, its producer."""
        return DeadLetterSettings(
            self.dead_letter_topic,
            self.clusters[self.local_cluster],
            self.destination_replication_factor,
            self.producer_tuning(),
        )


def _check_naming(var: str, flow: FlowSettings) -> None:
    """A flow's naming policy has what it needs, and suits its target and its ACL sync."""
    if flow.naming is Naming.PREFIX and not flow.prefix:
        raise ConfigError(var + "PREFIX", "required by the prefix naming policy")
    if flow.naming is Naming.SOURCE_ALIAS and not flow.separator:
        raise ConfigError(var + "SEPARATOR", "must not be empty")
    if flow.acl_sync is AclPolicy.MOVABLE and flow.naming is not Naming.IDENTITY:
        raise ConfigError(
            var + "ACL_SYNC",
            "movable keeps each topic's name, so it needs NAMING=identity; a renamed copy is "
            "read, not written, by the applications: use mm2",
        )
    if flow.source == flow.target and flow.naming is Naming.IDENTITY:
        raise ConfigError(
            var + "TARGET",
            "an identity flow into its own source cluster would copy every topic onto itself; "
            "give another target or a renaming policy",
        )
