"""MirrorMaker 1 and the Go mirror maker: a command line and the properties files it names.

This module owns :func:`mirror_maker_translation`: the options (``--opt value``, ``--opt=value``
or ``-opt value``; a flag may be followed by ``true``/``false``) parsed as the two tools parse
them, then one flow per ``--consumer.config`` file into the ``--producer.config`` cluster. A
cluster's alias is its file's ``replicator.cluster.alias``, else its first bootstrap server
(:func:`server_alias`), with a note. The
flows keep MirrorMaker 1's consumer group (``group.id``, else ``mirrormaker``) and start where its
consumer would (``auto.offset.reset``; when absent, each tool's own default: MirrorMaker 1's Java
consumer starts at the latest record, the Go mirror maker always from the earliest, see
:func:`dialect`). ``--preserve.partitions=false`` places records by key, as MirrorMaker 1 did; the
default keeps partition numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from replicator.config.values import is_host_port
from replicator.errors import ConfigError
from replicator.mirrormaker.clients import Client, client_property
from replicator.mirrormaker.connection import Cluster, cluster_env
from replicator.mirrormaker.names import flow_name, normalise_alias, unique
from replicator.mirrormaker.regex import INTERNAL_NOTE, exclusion, java_regex
from replicator.mirrormaker.translation import Builder, Translation, flow_var
from replicator.mirrormaker.values import load_properties, parse_bool, parse_int

# MirrorMaker 1's group when the consumer config names none (its Java consumer would refuse).
DEFAULT_GROUP = "mirrormaker"

_VALUE, _REPEATED, _FLAG, _HELP = "value", "repeated", "flag", "help"
_OPTIONS: dict[str, str] = {
    "consumer.config": _REPEATED,
    "producer.config": _VALUE,
    "whitelist": _VALUE,
    "include": _VALUE,
    "blacklist": _VALUE,
    "num.streams": _VALUE,
    "num.producers": _VALUE,
    "queue.size": _VALUE,
    "prefix": _VALUE,
    "preserve.partitions": _FLAG,
    "preserve.order": _FLAG,
    "abort.on.send.failure": _FLAG,
    "abortOnSendFail": _FLAG,
    "offset.commit.interval.ms": _VALUE,
    "new.consumer": _FLAG,
    "message.handler": _VALUE,
    "message.handler.args": _VALUE,
    "consumer.rebalance.listener": _VALUE,
    "rebalance.listener.args": _VALUE,
    "max.procs": _VALUE,
    "help": _HELP,
    "h": _HELP,
}
# Options only the Go mirror maker (elodina/go_kafka_client's mirrormaker) has.
_GO_ONLY = ("prefix", "preserve.partitions", "preserve.order", "max.procs")
GO, MIRROR_MAKER_1 = "the Go mirror maker", "MirrorMaker 1"
_BOOL_WORDS = frozenset({"true", "false", "1", "0", "t", "f"})


@dataclass(frozen=True)
class _Option:
    name: str  # canonical, without dashes
    shown: str  # as written: --whitelist, -whitelist
    value: str


def _parse(argv: list[str]) -> list[_Option]:
    options: list[_Option] = []
    i = 0
    while i < len(argv):
        name, shown, kind, inline = _option(argv[i])
        value, i = _value(argv, i + 1, kind, shown, inline)
        if kind != _REPEATED and any(o.name == name for o in options):
            raise ConfigError(shown, "given twice")
        options.append(_Option(name, shown, value))
    return options


def _option(token: str) -> tuple[str, str, str, str | None]:
    """An option's name, its spelling, its kind and its ``=value`` (``None``: not given so)."""
    if not token.startswith("-") or token in ("-", "--"):
        raise ConfigError(
            token, "unexpected argument: MirrorMaker options start with -- (see --help)"
        )
    dashes = "--" if token.startswith("--") else "-"
    name, has_value, inline = token[len(dashes) :].partition("=")
    shown = dashes + name
    kind = _OPTIONS.get(name)
    if kind is None:
        raise ConfigError(shown, "unknown MirrorMaker option (replicator mirror-maker --help)")
    if kind == _HELP:
        raise ConfigError(shown, "asks for help: run replicator mirror-maker --help")
    return name, shown, kind, inline if has_value else None


def _value(argv: list[str], i: int, kind: str, shown: str, inline: str | None) -> tuple[str, int]:
    """An option's value (inline, else ``argv[i]``; a flag's is optional) and the index of the
    next token."""
    if kind == _FLAG:
        if inline is not None:
            value = inline
        elif i < len(argv) and argv[i].lower() in _BOOL_WORDS:
            value = argv[i]
            i += 1
        else:
            value = "true"
        if parse_bool(value) is None:
            raise ConfigError(shown, f"expected true or false, got {value!r}")
        return value, i
    if inline is not None:
        return inline, i
    if i < len(argv):
        return argv[i], i + 1
    raise ConfigError(shown, "needs a value")


_NO_HANDLERS = (
    "message handlers are not supported: records are copied unchanged (with a "
    "provenance header); there is no pluggable code"
)
_NO_LISTENERS = (
    "rebalance listeners are not supported: the replicator's own listener commits "
    "acknowledged offsets and resumes each partition from the target"
)
# Options refused, with the reason.
_REFUSED: dict[str, str] = {
    "message.handler": _NO_HANDLERS,
    "message.handler.args": _NO_HANDLERS,
    "consumer.rebalance.listener": _NO_LISTENERS,
    "rebalance.listener.args": _NO_LISTENERS,
}


def mirror_maker_translation(argv: list[str]) -> Translation:
    """The replicator's configuration for a MirrorMaker 1 / Go mirror maker command line."""
    b = Builder()
    options = _parse(argv)
    by_name = {o.name: o for o in options}
    consumers = [o for o in options if o.name == "consumer.config"]
    producer = by_name.get("producer.config")
    if not consumers:
        raise ConfigError("--consumer.config", "required: one consumer config per source cluster")
    if producer is None:
        raise ConfigError("--producer.config", "required: the target cluster's producer config")
    for refused, reason in _REFUSED.items():
        if refused in by_name:
            raise ConfigError(by_name[refused].shown, reason)
    chosen = _topic_filter(options)
    target, sources = _clusters(b, producer, consumers)
    b.topology(target.alias, producer.shown, "mirror-maker")
    servers = {source.alias: cluster_env(b, source) for source in sources}
    servers[target.alias] = cluster_env(b, target)
    _flows(b, sources, target, servers, producer, chosen, by_name)
    _options(b, options, by_key=_by_key(by_name))
    return b.translation()


def _topic_filter(options: list[_Option]) -> _Option:
    """The one topic filter given: ``--whitelist`` (``--include``) or ``--blacklist``."""
    filters = [o for o in options if o.name in ("whitelist", "include", "blacklist")]
    if not filters:
        raise ConfigError(
            "--whitelist", "required: exactly one of --whitelist (or --include) and --blacklist"
        )
    if len(filters) > 1:
        raise ConfigError(
            filters[1].shown,
            f"cannot be given with {filters[0].shown}: exactly one of --whitelist (or --include) "
            "and --blacklist",
        )
    return filters[0]


def _clusters(
    b: Builder, producer: _Option, consumers: list[_Option]
) -> tuple[Cluster, list[Cluster]]:
    """The target cluster (the producer config's) and the sources, their files' client
    properties read."""
    # Clusters: each named by its file's replicator.cluster.alias, else by its brokers. The
    # names given are reserved first, so a derived name never takes one; then the target's, so
    # it keeps its name when a source's brokers would give the same one.
    producer_path = Path(producer.value)
    producer_props = load_properties(producer_path, producer.shown)
    files = [(producer_path, producer.value, producer_props)]
    for option in consumers:
        path = Path(option.value)
        files.append((path, option.value, load_properties(path, option.shown)))
    taken = _named_aliases(files)
    target, *sources = (_cluster(b, path, label, props, taken) for path, label, props in files)
    for source, (_, _, props) in zip(sources, files[1:], strict=True):
        for key, value in props.items():
            client_property(b, Client("consumer", (source,)), key, value, source.origin(key))
    for key, value in producer_props.items():
        client_property(b, Client("producer", (target,)), key, value, target.origin(key))
    return target, sources


ALIAS_PROPERTY = "replicator.cluster.alias"


def server_alias(servers: str | None) -> str | None:
    """A cluster's default alias: its first bootstrap server (in sorted order, case ignored, so
    the list's order does not matter), the port left out when it is Kafka's 9092; ``None`` when
    no entry is a plain ``host:port`` (the address is refused with its reason later)."""
    entries = (s.strip().lower() for s in (servers or "").split(","))
    listed = sorted(s for s in entries if is_host_port(s))
    if not listed:
        return None
    host, _, port = listed[0].rpartition(":")
    return normalise_alias(host if port == "9092" else f"{host}-{port}")


def _named_aliases(files: list[tuple[Path, str, dict[str, str]]]) -> set[str]:
    """The aliases the files give with ``replicator.cluster.alias``; two files giving one is
    refused, naming the second."""
    named: set[str] = set()
    for _, label, props in files:
        given = props.get(ALIAS_PROPERTY)
        if given is None:
            continue
        alias = normalise_alias(given)
        if alias in named:
            raise ConfigError(
                f"{ALIAS_PROPERTY} (in {label})", f"names {alias}, the alias of another file too"
            )
        named.add(alias)
    return named


def _cluster(b: Builder, path: Path, label: str, props: dict[str, str], taken: set[str]) -> Cluster:
    """The cluster of one properties file, named (and its naming noted): by the file's
    ``replicator.cluster.alias`` (taken out of ``props``; already in ``taken``), else by its
    first bootstrap server (:func:`server_alias`), numbered if another cluster has that name.
    The name is in every record's provenance and in the flow's group: give it for good."""
    given = props.pop(ALIAS_PROPERTY, None)
    where = f"{ALIAS_PROPERTY} (in {label})"
    if given is not None:
        return Cluster(normalise_alias(given), label)
    servers = props.get("bootstrap.servers") or props.get("metadata.broker.list")
    by_servers = server_alias(servers)
    alias = unique(by_servers or normalise_alias(path.stem), taken)
    after = "its first bootstrap server" if by_servers else "its file's name"
    b.note(
        where,
        f"absent: the cluster is called {alias}, after {after}; the name is in every record's "
        "provenance and in the flow's consumer group, so a new name (another first server, "
        f"say) leaves earlier copies foreign and the committed offsets behind: set "
        f"{ALIAS_PROPERTY} to name the cluster for good (earlier versions named it after this "
        f"file: a deployment upgraded from one keeps its state with "
        f"{ALIAS_PROPERTY}={normalise_alias(path.stem)})",
    )
    return Cluster(alias, label)


def dialect(by_name: dict[str, _Option]) -> tuple[str, str]:
    """Which tool a command line is written for, and the option that says so.

    Both take ``--consumer.config``, ``--producer.config`` and ``--whitelist``; only the Go mirror
    maker has ``--prefix``, ``--preserve.partitions``, ``--preserve.order`` and ``--max.procs``.
    Their defaults differ: the Go tool's consumer is hard-coded to start from the earliest record
    (``AutoOffsetReset = SmallestOffset`` in its ``startConsumers``), MirrorMaker 1's is Kafka's
    consumer (``latest``).
    """
    for name in _GO_ONLY:
        if name in by_name:
            return GO, by_name[name].shown
    return MIRROR_MAKER_1, "none of the Go mirror maker's --prefix, --preserve.*, --max.procs"


def _by_key(by_name: dict[str, _Option]) -> bool:
    """Whether ``--preserve.partitions=false`` asks for records placed by key."""
    preserve = by_name.get("preserve.partitions")
    return preserve is not None and parse_bool(preserve.value) is False


@dataclass(frozen=True)
class _Line:
    """What every flow of one command line shares."""

    tool: str  # GO or MIRROR_MAKER_1
    target: Cluster
    target_servers: set[str]
    producer: _Option
    chosen: _Option  # the topic filter
    include: str | None
    exclude: str | None
    prefix: _Option | None
    preserve: _Option | None
    by_key: bool


def _flows(
    b: Builder,
    sources: list[Cluster],
    target: Cluster,
    servers: dict[str, list[str]],
    producer: _Option,
    chosen: _Option,
    by_name: dict[str, _Option],
) -> None:
    """One flow per source into the target, with the topic rules of ``chosen``; ``servers``:
    each cluster's bootstrap servers."""
    tool, said_by = dialect(by_name)
    b.note("command line", f"recognised as {tool}'s (by {said_by}): its defaults apply")
    include = exclude = None
    if chosen.name == "blacklist":
        exclude = exclusion(java_regex(b, chosen.value, chosen.shown))
        b.note(chosen.shown, INTERNAL_NOTE)
    else:
        include = java_regex(b, chosen.value, chosen.shown)
    line = _Line(
        tool,
        target,
        set(servers[target.alias]),
        producer,
        chosen,
        include,
        exclude,
        by_name.get("prefix"),
        by_name.get("preserve.partitions"),
        _by_key(by_name),
    )
    flows: set[str] = set()
    shared: dict[tuple[frozenset[str], str], str] = {}
    for source in sources:
        _flow(b, line, source, servers[source.alias], flows, shared)
    b.note(
        "--consumer.config",
        "heartbeats are off, as MirrorMaker 1 wrote nothing to its sources; with write access "
        "to a source, run the --print-env environment with the flow's HEARTBEATS=true: each "
        "flow then proves its path (age and delay in /status and the metrics)",
    )
    if len(sources) > 1 and line.prefix is None:
        b.note(
            "--consumer.config",
            "the sources are aggregated: topics of the same name land in one target topic, "
            + (
                "each record placed by key"
                if line.by_key
                else "each record in its source partition number"
            ),
        )


def _flow(
    b: Builder,
    line: _Line,
    source: Cluster,
    source_servers: list[str],
    flows: set[str],
    shared: dict[tuple[frozenset[str], str], str],
) -> None:
    """The flow of one source; ``flows``: the names taken, ``shared``: the source label of
    each (brokers, group) taken."""
    target, tool = line.target, line.tool
    flow = flow_name(source.alias, target.alias, flows)

    def fvar(field_name: str) -> str:
        return flow_var(flow, field_name)

    group, origin = _group(b, source, source_servers, shared)
    if line.prefix is None and set(source_servers) == line.target_servers:
        raise ConfigError(
            source.origin("bootstrap.servers"),
            f"names the same brokers as the producer config ({line.producer.value}): copying "
            "every topic onto itself under the same name; give another target or --prefix",
        )
    b.flow(
        flow,
        source.alias,
        target.alias,
        f"--consumer.config {source.label}",
        f"--producer.config {target.label}",
    )
    if line.prefix is not None:
        b.set(fvar("NAMING"), "prefix", line.prefix.shown)
        b.set(fvar("PREFIX"), line.prefix.value, line.prefix.shown)
    else:
        b.set(fvar("NAMING"), "identity", "MirrorMaker 1 (topic names kept)")
    if line.include is not None:
        b.set(fvar("TOPICS_INCLUDE"), line.include, line.chosen.shown)
    if line.exclude is not None:
        b.set(fvar("TOPICS_EXCLUDE"), line.exclude, line.chosen.shown)
    b.set(fvar("GROUP_ID"), group, origin)
    b.set(fvar("TAKE_OVER"), "mirrormaker1", f"{tool}'s own position (its group {group})")
    b.note(
        origin,
        f"the flow's consumer group is {group}; a partition the flow never committed starts "
        f"at the offset {tool} committed under {group} (where it stopped: nothing copied "
        f"twice, nothing skipped), and the flow commits under "
        f"{group}.{source.alias}.{target.alias}; stop {tool} first (it would share the "
        "group)",
    )
    _start(b, flow, source, tool)
    if line.preserve is not None and line.by_key:
        b.set(fvar("PRESERVE_PARTITIONS"), "false", line.preserve.shown)
    # MirrorMaker 1 only read its sources: heartbeats would need write access there.
    b.set(fvar("HEARTBEATS"), "false", "MirrorMaker 1 (nothing written to the source)")


def _group(
    b: Builder,
    source: Cluster,
    source_servers: list[str],
    shared: dict[tuple[frozenset[str], str], str],
) -> tuple[str, str]:
    """A source's consumer group (``group.id``, else :data:`DEFAULT_GROUP`) and its origin;
    two sources sharing brokers and group are noted."""
    if source.group_id is not None and source.group_id.value:
        group, origin = source.group_id.value, source.group_id.origin
    else:
        group, origin = DEFAULT_GROUP, source.origin("group.id")
        b.note(origin, f"absent: the flow's consumer group is {DEFAULT_GROUP}")
    twin = shared.setdefault((frozenset(source_servers), group), source.label)
    if twin != source.label:
        b.note(
            source.origin("bootstrap.servers"),
            f"the same brokers and group as {twin}: the two flows share the group, so they "
            "split the partitions between them and a partition that moves from one to the "
            "other starts without committed offset; give each consumer config its own "
            "group.id, or list the cluster once",
        )
    return group, origin


def _start(b: Builder, flow: str, source: Cluster, tool: str) -> None:
    """The flow's start position: the source's ``auto.offset.reset``, else the tool's own."""
    if source.start_from is not None:
        b.set(flow_var(flow, "START_FROM"), source.start_from.value, source.start_from.origin)
        return
    # Each tool's own default: the Go tool hard-coded earliest, MirrorMaker 1's Java
    # consumer had Kafka's latest.
    origin = source.origin("auto.offset.reset")
    start, effect = (
        (
            "earliest",
            "it always copied a topic from its earliest record: a partition "
            "without a committed offset of this flow is copied from its first record "
            "(auto.offset.reset=latest starts with new records)",
        )
        if tool == GO
        else (
            "latest",
            "its Kafka consumer's: a partition without a committed offset "
            "of this flow starts with new records (auto.offset.reset=earliest copies "
            "the history)",
        )
    )
    b.set(flow_var(flow, "START_FROM"), start, f"{origin} ({tool}'s default)")
    b.note(origin, f"absent: {tool}'s default, {start}, applies ({effect})")


_NEVER_DROPPED = (
    "a record the target refuses for good never is dropped: it halts its partition on that leg "
    "(or goes to the dead-letter topic, REPLICATOR_RECORD_TOO_LARGE_POLICY), the other "
    "partitions go on"
)
_POSITIVE = ("num.streams", "num.producers", "max.procs")
# Options accepted with a note alone.
_OPTION_NOTES: dict[str, str] = {
    "num.streams": "partitions are the unit of concurrency: every source partition is fetched "
    "and sent independently, without stream threads",
    "num.producers": "one producer per target cluster (idempotent where it allows)",
    "max.procs": "one process with one event loop; partitions are sent concurrently",
    "abort.on.send.failure": _NEVER_DROPPED,
    "abortOnSendFail": _NEVER_DROPPED,
    "new.consumer": "the Kafka consumer protocol (bootstrap.servers) is always used",
}


def _options(b: Builder, options: list[_Option], *, by_key: bool) -> None:
    """The options that tune the whole replicator, or are accepted with a note."""
    for option in options:
        _tuning(b, option, by_key=by_key)
    if not any(o.name == "preserve.partitions" for o in options):
        b.note(
            "--preserve.partitions (absent)",
            "records keep their source partition number here (MirrorMaker 1 and the Go mirror "
            "maker place them by key unless told to preserve partitions), so a target topic "
            "needs at least as many partitions as its source; --preserve.partitions=false "
            "places them by key",
        )


def _tuning(b: Builder, option: _Option, *, by_key: bool) -> None:
    """One option's setting or note (none for the options the flows read)."""
    name, shown, value = option.name, option.shown, option.value
    if name in _POSITIVE and parse_int(value, shown) < 1:
        raise ConfigError(shown, f"expected a positive number, got {value!r}")
    note = _OPTION_NOTES.get(name)
    if note is not None:
        b.note(shown, note)
    elif name == "queue.size":
        b.set("PARTITION_QUEUE_MAX_RECORDS", value.strip(), shown)
        b.note(
            shown,
            "bounds the records queued per source partition and leg "
            "(REPLICATOR_PARTITION_QUEUE_MAX_RECORDS), not one queue for all",
        )
    elif name == "offset.commit.interval.ms":
        b.set("COMMIT_INTERVAL_MS", value.strip(), shown)
    elif name == "preserve.partitions" and parse_bool(value) is False:
        b.note(
            shown,
            "records are placed by key as a Kafka producer places them (murmur2; keyless "
            "records spread by source offset), into any partition count: per-key order "
            "holds",
        )
    elif name == "preserve.order":
        b.note(
            shown,
            "order is always kept: per key where records are placed by key, else per source "
            "partition, into the same partition"
            if by_key
            else "order is always kept per source partition, into the same partition",
        )
