"""Topic configs: which a destination topic is created with, and which changes make it follow its
source. Pure logic over typed config entries (:class:`~replicator.kafka.admin.ConfigEntry`), no I/O.

Topic-level configs set on the source topic itself are copied at creation (never its defaults
nor broker-wide values: the destination cluster's own apply, :func:`creation_configs`); configs
matching ``REPLICATOR_TOPIC_CONFIGS_EXCLUDE`` (MM2's ``config.properties.exclude`` defaults) are
never copied. With ``REPLICATOR_TOPIC_CONFIG_SYNC=mirror``, exactly as MM2's sync does
(:func:`mirrored_config_changes`: lowered too, a source default removing the destination's
override). With ``raise-only`` (:func:`config_changes`) what a destination was given on purpose is
kept: a source override the destination lacks is set, and a source override that *changes* is
followed, but a destination override that differs from a source value the replicator has not seen
change is left alone (an operator's choice); a limit (retention, ``max.message.bytes``) is only
ever raised above the destination's *effective* value, so a destination never loses records
because a source's retention was lowered; a config removed at the source stays on the
destination.
"""

from __future__ import annotations

import re
from dataclasses import replace

from replicator.config.values import ConfigSync, DefaultsFrom
from replicator.kafka.admin import TOPIC_OVERRIDE, ConfigEntry

# Topic-level settings copied from the source topic: only those set on the topic itself (config
# source 1). A default (source 5, Kafka's built-in value) and a broker-wide value (sources 2-4)
# belong to each cluster and are never copied: copied, they would pin the source cluster's
# defaults on the destination as overrides of its own. Read-only and sensitive entries never are.
REPLICATED_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "delete.retention.ms",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.type",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.ms",
    }
)
# Limits that are only ever raised on a destination (-1: unlimited, the largest).
NEVER_LOWERED = frozenset({"retention.ms", "retention.bytes", "max.message.bytes"})


def as_kafka_reports(entries: list[ConfigEntry]) -> list[ConfigEntry]:
    """A topic's DescribeConfigs entries with each source as Apache Kafka reports it.

    Apache Kafka lists every topic config, each with where its value comes from: set on the
    topic (1), a broker-wide value (2-4) or its built-in default (5). A broker that lists only
    the configs set on the topic labels them defaults (the embedded broker, Tansu 0.6.0: source
    5): an answer that lacks a topic config Kafka always lists is such a broker's, and the
    defaults it names are the topic's own configs.
    """
    if {entry.name for entry in entries} >= REPLICATED_CONFIGS:
        return entries
    return [
        replace(entry, source=TOPIC_OVERRIDE) if entry.is_default else entry for entry in entries
    ]


def overrides(entries: list[ConfigEntry]) -> dict[str, str]:
    """The configs set on the topic itself (what AlterConfigs replaces)."""
    return {
        entry.name: entry.value
        for entry in entries
        if entry.is_override and entry.value is not None and not entry.sensitive
    }


def effective(entries: list[ConfigEntry]) -> dict[str, str]:
    """Every config's value, wherever it comes from (sensitive ones left out)."""
    return {
        entry.name: entry.value
        for entry in entries
        if entry.value is not None and not entry.sensitive
    }


def replicable(entries: list[ConfigEntry]) -> dict[str, str]:
    """The replicable configs set on the topic itself among a topic's config entries."""
    read_only = {entry.name for entry in entries if entry.read_only}
    return {
        name: value
        for name, value in overrides(entries).items()
        if name in REPLICATED_CONFIGS and name not in read_only
    }


def max_message_bytes(entries: list[ConfigEntry]) -> int | None:
    """The largest record batch the topic accepts, if its entries say."""
    for entry in entries:
        if entry.name == "max.message.bytes" and entry.value is not None:
            return int(entry.value)
    return None


def _at_least(current: str, wanted: str) -> bool:
    """Whether limit ``current`` is at least ``wanted`` (-1 is unlimited)."""
    try:
        have, want = int(current), int(wanted)
    except ValueError:
        return False
    return have < 0 or (want >= 0 and have >= want)


def mirrored_config_changes(
    source: dict[str, str],
    source_effective: dict[str, str],
    destination: dict[str, str],
    exclude: re.Pattern[str],
    defaults_from: DefaultsFrom,
) -> dict[str, str | None]:
    """The changes that make a destination topic's copied configs its source's, as MirrorMaker
    2's config sync makes them (``None``: delete the destination's override).

    A replicable config not excluded that the source overrides is set to the source's value,
    lower or higher; one the source leaves at its default loses the destination's override
    (``defaults_from`` target: the destination's own default applies), or is set to the
    source's default (``defaults_from`` source).
    """
    changes: dict[str, str | None] = {}
    for name in sorted(REPLICATED_CONFIGS):
        if exclude.fullmatch(name):
            continue
        current = destination.get(name)
        if name in source:
            wanted: str | None = source[name]
        elif defaults_from is DefaultsFrom.SOURCE:
            wanted = source_effective.get(name)
            if wanted is None:
                continue  # the source does not say its default: nothing to follow
        else:
            wanted = None
        if current != wanted:
            changes[name] = wanted
    return changes


def config_changes(
    source: dict[str, str],
    destination: dict[str, str],
    effective: dict[str, str],
    seen: dict[str, str] | None,
    exclude: re.Pattern[str],
) -> dict[str, str]:
    """The destination overrides to set so that a destination topic follows its source.

    ``source``: the source topic's overrides; ``destination``: the destination topic's overrides;
    ``effective``: the destination's effective values (whatever set them); ``seen``: the source
    overrides at the previous round (``None``: none yet, after a start). A replicable config not
    excluded is set when the destination has no override for it, or when the source changed it
    since the previous round; a limit is set only above the destination's effective value.
    """
    changes: dict[str, str] = {}
    for name, value in sorted(source.items()):
        if name not in REPLICATED_CONFIGS or exclude.fullmatch(name):
            continue
        current = destination.get(name)
        if current == value:
            continue
        changed = seen is not None and seen.get(name) != value
        if current is not None and not changed:
            continue  # the destination was given its own value: kept until the source changes
        now = effective.get(name, current)
        if name in NEVER_LOWERED and now is not None and _at_least(now, value):
            continue
        changes[name] = value
    return changes


def sync_changes(
    source_entries: list[ConfigEntry],
    destination_entries: list[ConfigEntry],
    seen: dict[str, str] | None,
    exclude: re.Pattern[str],
    sync: ConfigSync,
    defaults_from: DefaultsFrom,
) -> dict[str, str | None]:
    """One round's changes to a destination topic, from both topics' config entries, as ``sync``
    says (``seen``: the source overrides at the previous round, for raise-only)."""
    current = overrides(destination_entries)
    source = overrides(source_entries)
    if sync is ConfigSync.MIRROR:
        return mirrored_config_changes(
            source, effective(source_entries), current, exclude, defaults_from
        )
    return dict(config_changes(source, current, effective(destination_entries), seen, exclude))


def creation_configs(
    entries: list[ConfigEntry],
    exclude: re.Pattern[str],
    sync: ConfigSync = ConfigSync.RAISE_ONLY,
    defaults_from: DefaultsFrom = DefaultsFrom.TARGET,
) -> dict[str, str]:
    """The configs a destination topic is created with, from its source topic's config
    ``entries``: the replicable configs set on the source topic, the excluded ones left out
    (the destination cluster's defaults apply to the rest). With mirror sync and defaults from
    the source (MM2's ``use.defaults.from=source``), also the source's value of every other
    replicable config: what the first sync round would set anyway."""
    own = replicable(entries)
    if sync is ConfigSync.MIRROR and defaults_from is DefaultsFrom.SOURCE:
        wanted = mirrored_config_changes(own, effective(entries), {}, exclude, defaults_from)
        return {name: value for name, value in wanted.items() if value is not None}
    return {name: value for name, value in own.items() if not exclude.fullmatch(name)}
