"""MirrorMaker 2: a ``connect-mirror-maker.properties`` file.

This module owns :func:`mm2_translation`: the ``clusters`` (aliases normalised, the original
spelling kept as the cluster's ``TOPIC_ALIAS``), their client properties at every level
(top-level, ``<alias>.``, ``<alias>.consumer.``...), and one flow per ``A->B.enabled = true``
with its properties (top-level ones overridden by ``A->B.`` ones): the replication policy as the
flow's naming, ``topics``/``topics.exclude``, ``replication.factor``, the start position, and the
heartbeats (:mod:`~replicator.mirrormaker.mm2_heartbeats`); the checkpoints and group offset
sync (``groups``, ``emit.checkpoints.*``, ``sync.group.offsets.*``, MM2's defaults included).
What MirrorMaker 2 does that the replicator does not (ACL sync, Kafka Connect itself) is
accepted with a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from replicator.errors import ConfigError
from replicator.mirrormaker import mm2_heartbeats
from replicator.mirrormaker.clients import (
    BYTES_NOTE,
    NO_TRANSACTIONS_NOTE,
    Client,
    client_property,
    start_position,
)
from replicator.mirrormaker.connection import CONNECTION_KEYS, Cluster, cluster_env
from replicator.mirrormaker.mm2_heartbeats import Heartbeats
from replicator.mirrormaker.names import flow_name, normalise_alias, unique
from replicator.mirrormaker.regex import INTERNAL_NOTE, exclusion, java_regex
from replicator.mirrormaker.translation import Builder, Translation, flow_var
from replicator.mirrormaker.values import load_properties, parse_bool, parse_int, split_list

# MirrorMaker 2's default topics.exclude (DefaultTopicFilter).
MM2_DEFAULT_TOPICS_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
DEFAULT_REPLICATION_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_REPLICATION_POLICIES = frozenset(
    {"org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}
)
DEFAULT_TOPIC_FILTER = "org.apache.kafka.connect.mirror.DefaultTopicFilter"

_FLOW_KEYS = frozenset(
    {
        "enabled",
        "topics",
        "topics.exclude",
        "topics.blacklist",
        "replication.factor",
        "replication.policy.class",
        "replication.policy.separator",
        "consumer.auto.offset.reset",
        "source.consumer.auto.offset.reset",
        "topic.filter.class",
        "sync.topic.acls.enabled",
    }
    | mm2_heartbeats.KEYS
)
_GROUPS_GLOBAL = (
    "ignored for one flow: the groups synced are one setting for every flow "
    "(REPLICATOR_SYNC_GROUPS, REPLICATOR_SYNC_GROUP_OFFSETS): give it without the flow"
)
_CHECKPOINTS_TOPIC = (
    "the checkpoints topic (REPLICATOR_CHECKPOINTS_TOPIC, one per target cluster) is created "
    "with REPLICATOR_DESTINATION_REPLICATION_FACTOR"
)
_ALWAYS_LISTED = "groups are listed again at every round (REPLICATOR_SYNC_GROUPS_INTERVAL_MS)"
# MirrorMaker 2's defaults (MirrorCheckpointConfig, DefaultGroupFilter).
MM2_DEFAULT_GROUPS_EXCLUDE = "console-consumer-.*, connect-.*, __.*"
_GROUP_SYNC_KEYS = frozenset(
    {
        "emit.checkpoints.enabled",
        "emit.checkpoints.interval.seconds",
        "emit.offset-syncs.enabled",
        "sync.group.offsets.enabled",
        "sync.group.offsets.interval.seconds",
        "groups",
        "groups.exclude",
        "groups.blacklist",
    }
)
_NO_CONNECT = (
    "there is no Kafka Connect here and no internal topic of its own: each flow keeps its "
    "offsets in its consumer groups on the source"
)
_NO_REST = (
    "no Connect REST API: /livez, /readyz, /status and /metrics are served on REPLICATOR_HTTP_PORT"
)
_CONFIGS_GLOBAL = (
    "ignored for one flow: topic config sync is one setting for every flow "
    "(REPLICATOR_TOPIC_CONFIG_SYNC_INTERVAL_MS, REPLICATOR_TOPIC_CONFIGS_EXCLUDE): give it "
    "without the flow"
)
_NOTES: dict[str, str] = {
    "sync.topic.configs.enabled": _CONFIGS_GLOBAL,
    "sync.topic.configs.interval.seconds": _CONFIGS_GLOBAL,
    "config.properties.exclude": _CONFIGS_GLOBAL,
    "config.properties.blacklist": _CONFIGS_GLOBAL,
    "sync.topic.acls.interval.seconds": "ignored for one flow: one interval for every ACL sync "
    "(REPLICATOR_ACL_SYNC_INTERVAL_MS): give it without the flow",
    "heartbeats.topic.replication.factor": mm2_heartbeats.TOPIC_NOTE,
    "checkpoints.topic.replication.factor": _CHECKPOINTS_TOPIC,
    "refresh.groups.enabled": _ALWAYS_LISTED,
    "refresh.groups.interval.seconds": _ALWAYS_LISTED,
    "offset-syncs.topic.replication.factor": _NO_CONNECT,
    "offset-syncs.topic.location": _NO_CONNECT,
    "offset.lag.max": _NO_CONNECT,
    "offset.storage.replication.factor": _NO_CONNECT,
    "status.storage.replication.factor": _NO_CONNECT,
    "config.storage.replication.factor": _NO_CONNECT,
    "offset.storage.topic": "no Connect worker; read once, where a flow takes over "
    "MirrorMaker 2's position (REPLICATOR_FLOWS__<FLOW>__TAKE_OVER_TOPIC)",
    "status.storage.topic": _NO_CONNECT,
    "config.storage.topic": _NO_CONNECT,
    "offset.flush.interval.ms": _NO_CONNECT,
    "offset.flush.timeout.ms": _NO_CONNECT,
    "scheduled.rebalance.max.delay.ms": _NO_CONNECT,
    "tasks.max": "one process: every source partition is fetched and sent independently "
    "(partitions are the unit of concurrency)",
    "key.converter": BYTES_NOTE,
    "value.converter": BYTES_NOTE,
    "header.converter": BYTES_NOTE,
    "refresh.topics.enabled": "topics are always listed again every REPLICATOR_METADATA_MAX_AGE_MS",
    "exactly.once.support": NO_TRANSACTIONS_NOTE,
    "exactly.once.source.support": NO_TRANSACTIONS_NOTE,
    "replication.policy.internal.topic.separator.enabled": _NO_CONNECT,
    "admin.timeout.ms": "admin requests use REPLICATOR_REQUEST_TIMEOUT_MS",
    "listeners": _NO_REST,
}
_PREFIX_NOTES: dict[str, str] = {
    "dedicated.mode.": _NO_REST,
    "rest.": _NO_REST,
    "checkpoints.topic.": _CHECKPOINTS_TOPIC,
    "offset-syncs.topic.": _NO_CONNECT,
}


_CONFIG_SYNC_KEYS = frozenset(
    {
        "sync.topic.configs.enabled",
        "sync.topic.configs.interval.seconds",
        "config.properties.exclude",
        "config.properties.blacklist",
        "use.defaults.from",
    }
)


def _config_sync(b: Builder, given: dict[str, tuple[str, str]]) -> None:
    """MM2's topic config sync properties: REPLICATOR_TOPIC_CONFIG_SYNC_INTERVAL_MS and
    REPLICATOR_TOPIC_CONFIGS_EXCLUDE (which, as in MM2, replaces the default exclusions)."""
    enabled = given.get("sync.topic.configs.enabled")
    interval = given.get("sync.topic.configs.interval.seconds")
    if enabled is not None and parse_bool(enabled[0]) is None:
        raise ConfigError(enabled[1], f"expected true or false, got {enabled[0]!r}")
    if enabled is not None and parse_bool(enabled[0]) is False:
        b.set("TOPIC_CONFIG_SYNC_INTERVAL_MS", "0", enabled[1])
        b.note(enabled[1], "topic configs are copied when a target topic is created, not synced")
        if interval is not None:
            b.note(interval[1], "ignored: topic config sync is off")
    else:
        where = enabled[1] if enabled is not None else "sync.topic.configs.enabled (default)"
        b.set("TOPIC_CONFIG_SYNC", "mirror", where)
        b.note(
            where,
            "target topics' configs follow their source's as MirrorMaker 2's sync makes them "
            "(IncrementalAlterConfigs, every REPLICATOR_TOPIC_CONFIG_SYNC_INTERVAL_MS): lowered "
            "as well as raised, and a config back at its default on the source is removed on "
            "the target (use.defaults.from=target) or given the source's value (=source)",
        )
        if interval is not None:
            seconds = parse_int(interval[0], interval[1])
            b.set("TOPIC_CONFIG_SYNC_INTERVAL_MS", str(max(seconds, 0) * 1000), interval[1])
        defaults = given.get("use.defaults.from")
        if defaults is not None:
            value = defaults[0].strip().lower()
            if value not in ("source", "target"):
                raise ConfigError(defaults[1], f"expected source or target, got {defaults[0]!r}")
            b.set("TOPIC_CONFIG_DEFAULTS_FROM", value, defaults[1])
    for key in ("config.properties.exclude", "config.properties.blacklist"):
        if key in given:
            value, where = given[key]
            b.set("TOPIC_CONFIGS_EXCLUDE", java_regex(b, value, where) or "(?!)", where)
            b.note(
                where,
                "replaces the default exclusions, as in MirrorMaker 2",
            )
            break


def _flag(given: dict[str, tuple[str, str]], key: str, default: bool) -> bool:
    """A true/false property of ``given`` (``default`` when absent)."""
    if key not in given:
        return default
    value, origin = given[key]
    parsed = parse_bool(value)
    if parsed is None:
        raise ConfigError(origin, f"expected true or false, got {value!r}")
    return parsed


def _no_offset_syncs(b: Builder, given: dict[str, tuple[str, str]]) -> None:
    """The note of ``emit.offset-syncs.enabled = false``, which turns the checkpoints off."""
    overridden = sorted(k for k in given if k.startswith(("emit.checkpoints", "sync.group")))
    b.note(
        given["emit.offset-syncs.enabled"][1],
        "checkpoints and group offset sync are off: MirrorMaker 2 refuses to run its "
        "checkpoint connector without offset syncs"
        + (f" (so {', '.join(overridden)} have no effect)" if overridden else "")
        + "; here they need no offset-syncs topic: leave the property out to have them",
    )


def _groups_rule(b: Builder, given: dict[str, tuple[str, str]], where: str) -> tuple[str, str]:
    """REPLICATOR_SYNC_GROUPS's regex (``groups`` with the exclusions, MM2's by default), and
    its origin."""
    include = given.get("groups", (".*", where))
    groups = java_regex(b, include[0], include[1]) or "(?!)"
    excluded = [given[k] for k in ("groups.exclude", "groups.blacklist") if k in given]
    exclude = excluded or [(MM2_DEFAULT_GROUPS_EXCLUDE, where)]
    parts = [java_regex(b, text, origin) for text, origin in exclude]
    never = "|".join(p for p in parts if p)
    every = groups if groups == ".*" else f"(?:{groups})"
    rule = f"(?!(?:{never})\\Z){every}" if never else groups
    return rule, include[1]


def _sync_interval(b: Builder, given: dict[str, tuple[str, str]]) -> None:
    """REPLICATOR_SYNC_GROUPS_INTERVAL_MS: the shorter of MM2's two intervals."""
    interval_keys = ("emit.checkpoints.interval.seconds", "sync.group.offsets.interval.seconds")
    intervals = [given[k] for k in interval_keys if k in given]
    if intervals:
        seconds = min(parse_int(value, origin) for value, origin in intervals)
        b.set("SYNC_GROUPS_INTERVAL_MS", str(max(seconds, 1) * 1000), intervals[0][1])
        if len(intervals) > 1:
            b.note(intervals[1][1], "one interval for checkpoints and offset sync: the shorter")


def _group_sync(b: Builder, given: dict[str, tuple[str, str]], where: str) -> None:
    """MM2's checkpoint and group offset sync properties, with MM2's defaults (checkpoints on,
    every group but MM2's excluded ones, offsets not synced): REPLICATOR_SYNC_GROUPS (the
    groups regex with the exclusions), its interval and REPLICATOR_SYNC_GROUP_OFFSETS."""
    emit = _flag(given, "emit.checkpoints.enabled", True)
    sync = _flag(given, "sync.group.offsets.enabled", False)
    if not _flag(given, "emit.offset-syncs.enabled", True):
        # MM2 refuses to run its checkpoint connector without offset syncs: none of it runs.
        emit = sync = False
        _no_offset_syncs(b, given)
    if not emit and not sync:
        for key in ("groups", "groups.exclude", "groups.blacklist"):
            if key in given:
                b.note(given[key][1], "ignored: checkpoints are off")
        return
    rule, include_origin = _groups_rule(b, given, where)
    b.set("SYNC_GROUPS", rule, include_origin)
    b.set("MM2_CHECKPOINTS", "true", f"{where} (MirrorMaker 2's checkpoints)")
    if not emit:
        b.note(
            given["emit.checkpoints.enabled"][1],
            "checkpoints are written anyway: group offsets are synced from them",
        )
    _sync_interval(b, given)
    if sync:
        b.set("SYNC_GROUP_OFFSETS", "true", given["sync.group.offsets.enabled"][1])
    b.note(
        include_origin,
        "consumer groups' positions are translated exactly (from provenance) into each flow's "
        "target on an interval and kept in its checkpoints topic; `replicator failover` moves "
        "a group; each is also written as MirrorMaker 2 writes it, into "
        "<source>.checkpoints.internal of the target, for MirrorClient and RemoteClusterUtils"
        + ("; offsets are committed for groups idle on the target, only forward" if sync else ""),
    )


def _note(b: Builder, key: str, value: str, origin: str) -> bool:
    """The note of an MM2 property accepted without a translation (False: not one)."""
    note = _NOTES.get(key) or next(
        (text for prefix, text in _PREFIX_NOTES.items() if key.startswith(prefix)), None
    )
    if note is None:
        return False
    b.note(origin, note)
    return True


def _in(label: str, key: str) -> str:
    """A property's origin: its key in the file ``label``."""
    return f"{key} (in {label})"


Pair = tuple[str, str]  # a flow's (source, target) cluster names, as the file spells them
Given = dict[str, tuple[str, str]]  # property -> (value, origin)


@dataclass
class _Sorted:
    """An MM2 file's properties sorted by what reads them: each flow's (``A->B.``), the
    top-level flow properties (every flow's default), the topic config sync and the group
    sync ones. The clusters' and the clients' are given to their :class:`Cluster` at once."""

    flows: dict[Pair, Given] = field(default_factory=dict)
    top: Given = field(default_factory=dict)
    config_sync: Given = field(default_factory=dict)
    group_sync: Given = field(default_factory=dict)


def mm2_translation(path: Path) -> Translation:
    """The replicator's configuration for a MirrorMaker 2 ``connect-mirror-maker.properties``."""
    b = Builder()
    label = str(path)
    props = load_properties(path, label)
    clusters = _clusters(props, label)
    found = _sort(b, props, clusters, label)
    _config_sync(b, found.config_sync)
    _group_sync(b, found.group_sync, label)
    enabled = _enabled(b, found, label)
    _connect(b, clusters, enabled, label)
    _flows(b, clusters, enabled, found, label)
    return b.translation()


def _clusters(props: dict[str, str], label: str) -> dict[str, Cluster]:
    """The ``clusters`` listed, by their name in the file (aliases normalised, made unique)."""
    if "config.providers" in props:
        raise ConfigError(
            _in(label, "config.providers"),
            "config providers are not supported: write the values into the file",
        )
    names = split_list(props.get("clusters", ""))
    if not names:
        raise ConfigError(_in(label, "clusters"), "required: the comma list of cluster aliases")
    taken: set[str] = set()
    clusters: dict[str, Cluster] = {}
    for name in names:
        alias = unique(normalise_alias(name), taken)
        clusters[name] = Cluster(
            alias,
            label,
            key_prefix=f"{name}.",
            topic_alias=None if alias == name else name,
            alias_origin=_in(label, "clusters"),
        )
    return clusters


def _sort(b: Builder, props: dict[str, str], clusters: dict[str, Cluster], label: str) -> _Sorted:
    """Every property but ``clusters`` read or set aside (:class:`_Sorted`)."""
    found = _Sorted()
    everywhere = tuple(clusters.values())
    by_length = sorted(clusters, key=len, reverse=True)
    for key, value in props.items():
        if key == "clusters":
            continue
        where = _in(label, key)
        if "->" in key:
            _flow_property(b, found, by_length, key, value, where)
            continue
        owner = next((n for n in by_length if key.startswith(f"{n}.")), None)
        if owner is not None:
            _cluster_property(b, clusters[owner], key[len(owner) + 1 :], value, where)
        else:
            _top_property(b, found, everywhere, key, value, where)
    return found


def _flow_property(
    b: Builder, found: _Sorted, by_length: list[str], key: str, value: str, where: str
) -> None:
    """An ``A->B.<property>``: kept for the flow when it is a flow's, else noted."""
    pair = next(
        ((s, t) for s in by_length for t in by_length if s != t and key.startswith(f"{s}->{t}.")),
        None,
    )
    if pair is None:
        b.note(where, "ignored: names no pair of the clusters listed in clusters")
        return
    rest = key[len(f"{pair[0]}->{pair[1]}.") :]
    if rest in _FLOW_KEYS:
        found.flows.setdefault(pair, {})[rest] = (value, where)
    elif rest == "refresh.topics.interval.seconds":
        b.note(where, "ignored: give it without the flow: one interval for all")
    elif rest in _GROUP_SYNC_KEYS:
        b.note(where, _GROUPS_GLOBAL)
    elif not _note(b, rest, value, where):
        b.note(where, f"ignored: {rest} has no meaning for a flow here")


def _top_property(
    b: Builder,
    found: _Sorted,
    everywhere: tuple[Cluster, ...],
    key: str,
    value: str,
    where: str,
) -> None:
    """A top-level property (no cluster, no flow): every flow's, every cluster's, or MM2's."""
    if key in _FLOW_KEYS:
        found.top[key] = (value, where)
    elif key == "refresh.topics.interval.seconds":
        _refresh_topics(b, value, where)
    elif key == "sync.topic.acls.interval.seconds":
        found.top[key] = (value, where)  # one setting for every flow: read with each flow
    elif key in _CONFIG_SYNC_KEYS:
        found.config_sync[key] = (value, where)
    elif key in _GROUP_SYNC_KEYS:
        found.group_sync[key] = (value, where)
    elif key.startswith(("consumer.", "producer.", "admin.")):
        role, _, rest = key.partition(".")
        client_property(b, Client(role, everywhere, 0, mm2=True), rest, value, where)
    elif key in CONNECTION_KEYS or key.startswith(("sasl.", "ssl.", "zookeeper.", "zk.")):
        client_property(b, Client("any", everywhere, 1, mm2=True), key, value, where)
    elif not _note(b, key, value, where):
        b.note(where, f"ignored: {key} has no meaning here")


def _refresh_topics(b: Builder, value: str, where: str) -> None:
    """``refresh.topics.interval.seconds``: REPLICATOR_METADATA_MAX_AGE_MS."""
    seconds = parse_int(value, where)
    b.set("METADATA_MAX_AGE_MS", str(seconds * 1000), where)
    b.note(
        where,
        f"topics are listed again (and client metadata refreshed) every {seconds} s "
        "(REPLICATOR_METADATA_MAX_AGE_MS)",
    )


def _enabled(b: Builder, found: _Sorted, label: str) -> list[Pair]:
    """The flows enabled (``A->B.enabled = true``), in the file's order; the properties of the
    others noted as ignored. None is an error: nothing would be replicated."""
    if "enabled" in found.top:
        b.note(
            found.top["enabled"][1],
            "ignored: flows are enabled one by one (<source>-><target>.enabled)",
        )
        del found.top["enabled"]
    enabled = [pair for pair, scoped in found.flows.items() if _is_enabled(b, scoped)]
    for pair, scoped in found.flows.items():
        if pair not in enabled:
            for rest, (_, where) in scoped.items():
                if rest != "enabled":
                    b.note(where, "ignored: this flow is not enabled")
    if not enabled:
        raise ConfigError(
            _in(label, "<source>-><target>.enabled"),
            "no flow is enabled (MirrorMaker 2's default is false): nothing would be replicated",
        )
    return enabled


def _is_enabled(b: Builder, scoped: Given) -> bool:
    """Whether a flow's ``enabled`` is true (anything but true or false is noted)."""
    flag = scoped.get("enabled")
    if flag is None:
        return False
    if flag[0].strip().lower() == "true":
        return True
    if flag[0].strip().lower() != "false":
        b.note(flag[1], f"{flag[0]!r} is not true: the flow is off, as MirrorMaker 2 reads it")
    return False


def _connect(b: Builder, clusters: dict[str, Cluster], enabled: list[Pair], label: str) -> None:
    """The topology (local: the first flow's target) and the clusters of the enabled flows."""
    first_target = clusters[enabled[0][1]]
    b.topology(first_target.alias, _in(label, f"{enabled[0][0]}->{enabled[0][1]}.enabled"), "mm2")
    used = {name for pair in enabled for name in pair}
    for name, cluster in clusters.items():
        if name in used:
            cluster_env(b, cluster)
        else:
            b.note(_in(label, "clusters"), f"{name} takes part in no enabled flow: not connected")
    b.note(label, INTERNAL_NOTE)


def _flows(
    b: Builder, clusters: dict[str, Cluster], enabled: list[Pair], found: _Sorted, label: str
) -> None:
    """Each enabled flow, with its heartbeats (and the heartbeats of its reverse, when that
    flow is not enabled)."""
    flows: set[str] = set()
    heartbeats = Heartbeats(label)
    for source_name, target_name in enabled:
        scoped = {**found.top, **found.flows[(source_name, target_name)]}
        source, target = clusters[source_name], clusters[target_name]
        flow = flow_name(source.alias, target.alias, flows)
        _flow(b, flow, source, target, f"{source_name}->{target_name}.", scoped, label)
        heartbeats.flow(b, flow, scoped)
        if (target_name, source_name) not in enabled:
            reverse = {**found.top, **found.flows.get((target_name, source_name), {})}
            heartbeats.reverse(b, flow, f"{target_name}->{source_name}", reverse)
    heartbeats.finish(b)


def _cluster_property(b: Builder, cluster: Cluster, rest: str, value: str, where: str) -> None:
    if rest.startswith(("consumer.", "producer.", "admin.")):
        role, _, key = rest.partition(".")
        client_property(b, Client(role, (cluster,), 2, mm2=True), key, value, where)
    elif not _note(b, rest, value, where):  # MM2's own, given for one cluster
        client_property(b, Client("any", (cluster,), 3, mm2=True), rest, value, where)


def _flow(
    b: Builder,
    flow: str,
    source: Cluster,
    target: Cluster,
    flow_scoped: str,
    scoped: Given,
    label: str,
) -> None:
    """One enabled flow's variables; ``flow_scoped``: its properties' prefix, ``A->B.``."""
    enabled_origin = scoped["enabled"][1]
    b.flow(flow, source.alias, target.alias, enabled_origin, enabled_origin)
    _naming(b, flow, scoped, label)
    _topics(b, flow, scoped, label)
    factor = scoped.get("replication.factor")
    if factor is not None:
        b.set(flow_var(flow, "REPLICATION_FACTOR"), factor[0].strip(), factor[1])
    else:
        b.note(
            f"replication.factor (in {label})",
            "absent: MirrorMaker 2 would create target topics with 2 replicas; here they get "
            "their source topic's replication factor",
        )
    _start(b, flow, source, flow_scoped, scoped)
    _acl_sync(b, flow, scoped)
    # Where MirrorMaker 2 stopped (its Connect offsets on the target) comes before START_FROM:
    # the switch then copies nothing twice and skips nothing (takeover.py).
    b.set(flow_var(flow, "TAKE_OVER"), "mirrormaker2", f"MirrorMaker 2's own position ({label})")
    storage = scoped.get("offset.storage.topic")
    if storage is not None:
        b.set(flow_var(flow, "TAKE_OVER_TOPIC"), storage[0].strip(), storage[1])


def _acl_sync(b: Builder, flow: str, scoped: Given) -> None:
    """``sync.topic.acls.enabled`` (MirrorMaker 2's default: true): the flow's ACL sync."""
    given = scoped.get("sync.topic.acls.enabled")
    where = given[1] if given is not None else "sync.topic.acls.enabled (default)"
    if not _flag(scoped, "sync.topic.acls.enabled", True):
        b.note(where, "topic ACLs are not synced: grant them on the target")
        return
    interval = scoped.get("sync.topic.acls.interval.seconds")
    if interval is not None:
        seconds = parse_int(interval[0], interval[1])
        if seconds == 0:
            raise ConfigError(
                interval[1], "must not be 0 (MirrorMaker 2 refuses it); a negative one turns off"
            )
        if seconds < 0:  # MirrorMaker 2's scheduler never runs a negative interval
            b.note(interval[1], "negative: topic ACLs are not synced, as in MirrorMaker 2")
            return
        b.set("ACL_SYNC_INTERVAL_MS", str(seconds * 1000), interval[1])
    b.set(flow_var(flow, "ACL_SYNC"), "mm2", where)
    b.note(
        where,
        "the source's literal topic ACLs are kept on the target as MirrorMaker 2 keeps them "
        "(renamed as the topics are, ALLOW Write left out, ALLOW All becomes Read, DENY kept), "
        "every REPLICATOR_ACL_SYNC_INTERVAL_MS (sync.topic.acls.interval.seconds; 60 s when "
        "absent, where MirrorMaker 2 waits 600 s); each binding left out or changed is said "
        "once, and a binding the sync created is removed when its source is",
    )


def _naming(b: Builder, flow: str, scoped: Given, label: str) -> None:
    """The flow's naming, from ``replication.policy.class``, and its separator."""
    policy = scoped.get("replication.policy.class")
    policy_class = policy[0].strip() if policy else DEFAULT_REPLICATION_POLICY
    if policy_class == DEFAULT_REPLICATION_POLICY:
        naming = "source-alias"
    elif policy_class in IDENTITY_REPLICATION_POLICIES:
        naming = "identity"
    else:
        assert policy is not None
        raise ConfigError(
            policy[1],
            f"{policy_class} is not supported: {DEFAULT_REPLICATION_POLICY} (topics named "
            "<source>.<topic>) or org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        )
    b.set(
        flow_var(flow, "NAMING"),
        naming,
        policy[1] if policy else f"replication.policy.class (default, in {label})",
    )
    separator = scoped.get("replication.policy.separator")
    if separator is not None:
        if naming == "source-alias":
            b.set(flow_var(flow, "SEPARATOR"), separator[0], separator[1])
        else:
            b.note(separator[1], "ignored: the identity policy does not rename topics")


def _topics(b: Builder, flow: str, scoped: Given, label: str) -> None:
    """The flow's topics: ``topic.filter.class``, ``topics`` and ``topics.exclude`` (MM2's
    default exclusions when absent)."""
    topic_filter = scoped.get("topic.filter.class")
    if topic_filter is not None and topic_filter[0].strip() != DEFAULT_TOPIC_FILTER:
        raise ConfigError(
            topic_filter[1],
            f"{topic_filter[0].strip()} is not supported: only {DEFAULT_TOPIC_FILTER}",
        )
    topics = scoped.get("topics")
    if topics is not None:
        b.set(flow_var(flow, "TOPICS_INCLUDE"), java_regex(b, topics[0], topics[1]), topics[1])
    exclude = scoped.get("topics.exclude") or scoped.get("topics.blacklist")
    if exclude is not None:
        regex = java_regex(b, exclude[0], exclude[1])
        b.set(flow_var(flow, "TOPICS_EXCLUDE"), exclusion(regex), exclude[1])
    else:
        default = MM2_DEFAULT_TOPICS_EXCLUDE
        b.set(
            flow_var(flow, "TOPICS_EXCLUDE"),
            exclusion(java_regex(b, default, "topics.exclude")),
            f"topics.exclude (MirrorMaker 2's default, in {label})",
        )


def _start(b: Builder, flow: str, source: Cluster, flow_scoped: str, scoped: Given) -> None:
    """The flow's start position: its own ``auto.offset.reset`` first, then the source
    cluster's, then the top-level one."""
    starts = [
        scoped[key]
        for key in ("consumer.auto.offset.reset", "source.consumer.auto.offset.reset")
        if key in scoped
    ]
    starts.sort(key=lambda found: not found[1].startswith(flow_scoped))  # flow-scoped first
    start = starts[0] if starts else None
    if start is not None and (start[1].startswith(flow_scoped) or source.start_from is None):
        b.set(flow_var(flow, "START_FROM"), start_position(start[0], start[1]), start[1])
    elif source.start_from is not None:
        b.set(flow_var(flow, "START_FROM"), source.start_from.value, source.start_from.origin)
