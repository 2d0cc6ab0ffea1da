"""Kafka client properties (consumer, producer and admin configs), shared by MM1 and MM2.

This module owns :func:`client_property`: one property of a consumer, producer or admin config
becomes a variable (``batch.size`` -> ``REPLICATOR_BATCH_MAX_BYTES``, ``group.id`` and
``auto.offset.reset`` -> the flow's ``GROUP_ID`` and ``START_FROM``), a note saying what happens
instead (commits, retries, buffers, sockets, serializers...), or a refusal (ZooKeeper). A
connection property is handed to its cluster (:mod:`~replicator.mirrormaker.connection`); a
consumer-only property in a producer config (and the reverse) is noted as meaningless there.
Settings that are one for the whole replicator (batching, compression...) are decided by the
first file giving them; a different later value is noted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from replicator.config.values import DEFAULT_TOPICS_EXCLUDE
from replicator.errors import ConfigError
from replicator.mirrormaker.connection import CONNECTION_KEYS, Cluster, Offer
from replicator.mirrormaker.translation import Builder
from replicator.mirrormaker.values import parse_bool, parse_int

_COMMIT_NOTE = (
    "offsets are committed only for records the target acknowledged, every "
    "REPLICATOR_COMMIT_INTERVAL_MS, never automatically"
)
BYTES_NOTE = "records are copied as bytes: keys, values and headers unchanged, no (de)serializer"
_GROUP_TIMING_NOTE = (
    "the consumer group's session and heartbeat timings are the client's defaults "
    "(aiokafka: session 10 s, heartbeat 3 s)"
)
_FETCH_NOTE = (
    "fetches are sized by REPLICATOR_FETCH_MAX_BYTES and REPLICATOR_MAX_PARTITION_FETCH_BYTES "
    "and wait at most REPLICATOR_FETCH_MAX_WAIT_MS (memory and latency stay bounded)"
)
_SOCKET_NOTE = "socket buffers and timeouts are the operating system's and the client's defaults"
_RETRY_NOTE = (
    "sends are retried until the target answers, one batch per partition in flight, in order "
    "(idempotent where the target allows); a stalled leg is reported after "
    "REPLICATOR_SEND_STALL_TIMEOUT_MS"
)
NO_TRANSACTIONS_NOTE = (
    "no transactions: duplicates are avoided by resuming from what the target holds "
    "(see docs/guarantees.md)"
)
_METADATA_NOTE = "metadata and topic listings are refreshed every REPLICATOR_METADATA_MAX_AGE_MS"
METRICS_NOTE = "metrics are served at /metrics (Prometheus) on REPLICATOR_HTTP_PORT"
_MEMORY_NOTE = (
    "memory is bounded per source partition and leg (REPLICATOR_PARTITION_QUEUE_MAX_RECORDS and "
    "REPLICATOR_PARTITION_QUEUE_MAX_BYTES), not by one producer buffer"
)

# Consumer properties accepted with a note: what happens instead.
_CONSUMER_NOTES: dict[str, str] = {
    "enable.auto.commit": _COMMIT_NOTE,
    "auto.commit.enable": _COMMIT_NOTE,
    "autocommit.enable": _COMMIT_NOTE,
    "auto.commit.interval.ms": _COMMIT_NOTE,
    "autocommit.interval.ms": _COMMIT_NOTE,
    "mirror.topics.whitelist": "the command line's --whitelist/--blacklist decides which "
    "topics are copied",
    "mirror.topics.blacklist": "the command line's --whitelist/--blacklist decides which "
    "topics are copied",
    "mirror.consumer.numthreads": "partitions are the unit of concurrency: each source "
    "partition is fetched and sent independently",
    "max.poll.records": "records are queued per source partition, up to "
    "REPLICATOR_PARTITION_QUEUE_MAX_RECORDS",
    "max.poll.interval.ms": "fetching never waits on a slow target: a full queue pauses only "
    "its own partition",
    "session.timeout.ms": _GROUP_TIMING_NOTE,
    "heartbeat.interval.ms": _GROUP_TIMING_NOTE,
    "partition.assignment.strategy": "the client's default assignor (range) spreads partitions "
    "over replicators sharing the flow's group",
    "key.deserializer": BYTES_NOTE,
    "value.deserializer": BYTES_NOTE,
    "isolation.level": "sources are always read read_committed: records of aborted "
    "transactions are never copied",
    "max.partition.fetch.bytes": _FETCH_NOTE,
    "fetch.message.max.bytes": _FETCH_NOTE,
    "consumer.timeout.ms": "the replicator runs until it is stopped (SIGTERM), it never times "
    "out on an idle source",
    "check.crcs": "the client checks CRCs",
    "allow.auto.create.topics": "the source is only read: no topic is created on it",
    "client.rack": "fetches go to partition leaders",
    "group.instance.id": "group members are dynamic: a restarted replicator rejoins its group",
}
_CONSUMER_PREFIX_NOTES: dict[str, str] = {"fetch.": _FETCH_NOTE, "rebalance.": _GROUP_TIMING_NOTE}

_PRODUCER_NOTES: dict[str, str] = {
    "max.in.flight.requests.per.connection": _RETRY_NOTE,
    "retries": _RETRY_NOTE,
    "message.send.max.retries": _RETRY_NOTE,
    "delivery.timeout.ms": _RETRY_NOTE,
    "max.block.ms": _MEMORY_NOTE,
    "buffer.memory": _MEMORY_NOTE,
    "queue.buffering.max.messages": _MEMORY_NOTE,
    "key.serializer": BYTES_NOTE,
    "value.serializer": BYTES_NOTE,
    "serializer.class": BYTES_NOTE,
    "key.serializer.class": BYTES_NOTE,
    "partitioner.class": "no partitioner class runs: records keep their source partition "
    "number, or, in a flow with PRESERVE_PARTITIONS=false writing to a topic with another "
    "partition count, are placed by key as Kafka's default partitioner does (murmur2)",
    "max.request.size": "requests are sized from REPLICATOR_BATCH_MAX_BYTES and the target "
    "topic's max.message.bytes; a larger record follows REPLICATOR_RECORD_TOO_LARGE_POLICY",
    "producer.type": "sends are always asynchronous, acknowledged by the target before offsets "
    "are committed",
    "transactional.id": NO_TRANSACTIONS_NOTE,
    "transaction.timeout.ms": NO_TRANSACTIONS_NOTE,
}

_COMMON_NOTES: dict[str, str] = {
    "client.id": "not used: the replicator names its clients replicator-<flow>[-...] "
    "(client-id quotas set for this id do not apply to them)",
    "retry.backoff.ms": _RETRY_NOTE,
    "send.buffer.bytes": _SOCKET_NOTE,
    "receive.buffer.bytes": _SOCKET_NOTE,
    "connections.max.idle.ms": _SOCKET_NOTE,
    "client.dns.lookup": _SOCKET_NOTE,
    "metadata.max.age.ms": _METADATA_NOTE,
    "topic.metadata.refresh.interval.ms": _METADATA_NOTE,
    "interceptor.classes": "no client interceptors run here",
    "metric.reporters": METRICS_NOTE,
    "auto.include.jmx.reporter": METRICS_NOTE,
}
_COMMON_PREFIX_NOTES: dict[str, str] = {
    "socket.": _SOCKET_NOTE,
    "reconnect.backoff.": _SOCKET_NOTE,
    "metrics.": METRICS_NOTE,
}
_TLS_NOTE = "TLS versions, ciphers and algorithms are Python's ssl defaults"
_TLS_KEYS = frozenset(
    {
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
        "ssl.provider",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.engine.factory.class",
        "ssl.curves.list",
        "ssl.sigalgs.list",
    }
)

_PRODUCER_ONLY = frozenset(
    {
        "acks",
        "request.required.acks",
        "batch.size",
        "linger.ms",
        "queue.buffering.max.ms",
        "compression.type",
        "compression.codec",
        "enable.idempotence",
    }
    | set(_PRODUCER_NOTES)
)
_CONSUMER_ONLY = frozenset(
    {"group.id", "groupid", "auto.offset.reset", "autooffset.reset", "exclude.internal.topics"}
    | set(_CONSUMER_NOTES)
)

_COMPRESSION = {
    "none": "none",
    "gzip": "gzip",
    "snappy": "snappy",
    "lz4": "lz4",
    "zstd": "zstd",
    "uncompressed": "none",
    "0": "none",
    "1": "gzip",
    "2": "snappy",
    "3": "lz4",
}


def start_position(value: str, origin: str) -> str:
    lowered = value.strip().lower()
    if lowered in ("smallest", "earliest"):
        return "earliest"
    if lowered in ("largest", "latest"):
        return "latest"
    if lowered == "none":
        raise ConfigError(
            origin,
            "none (fail without a committed offset) is not available: a partition without a "
            "committed offset starts at earliest or latest; give one of them",
        )
    raise ConfigError(origin, f"expected earliest (smallest) or latest (largest), got {value!r}")


@dataclass(frozen=True)
class Client:
    """Where client properties apply: a role (consumer, producer, admin or any) and clusters."""

    role: str
    clusters: tuple[Cluster, ...]
    priority: int = 1
    mm2: bool = False


def client_property(b: Builder, client: Client, key: str, value: str, origin: str) -> None:
    """Translate one Kafka client property: a variable, a note, or a ConfigError."""
    if key in ("zookeeper.connect", "zk.connect") or key.startswith(("zookeeper.", "zk.")):
        raise ConfigError(
            origin,
            "ZooKeeper is not used: the replicator talks to the brokers; give bootstrap.servers "
            "(host:port of the brokers) instead",
        )
    if key in CONNECTION_KEYS:
        for cluster in client.clusters:
            cluster.offer(key, value, origin, client.priority)
        return
    if key.startswith(("sasl.", "ssl.")):
        _security_property(b, client, key, value, origin)
        return
    if _other_role(b, client.role, key, origin):
        return
    if _consumer_property(b, client, key, value, origin):
        return
    if _producer_property(b, key, value, origin):
        return
    if key == "request.timeout.ms":
        b.set_global("REQUEST_TIMEOUT_MS", value.strip(), origin)
        return
    note = _COMMON_NOTES.get(key) or next(
        (text for prefix, text in _COMMON_PREFIX_NOTES.items() if key.startswith(prefix)), None
    )
    b.note(origin, note or f"ignored: {key} has no meaning here")


def _security_property(b: Builder, client: Client, key: str, value: str, origin: str) -> None:
    """A ``sasl.``/``ssl.`` property that is not a connection one: noted, or offered to the
    clusters when it is of a SASL mechanism the replicator refuses once it is used."""
    if key in _TLS_KEYS:
        b.note(origin, _TLS_NOTE)
    elif key.startswith("sasl.kerberos.") or key.startswith("sasl.oauthbearer."):
        for cluster in client.clusters:
            cluster.offer(key, value, origin, client.priority)  # refused if used
    else:
        b.note(origin, f"ignored: {key} has no meaning here")


def _other_role(b: Builder, role: str, key: str, origin: str) -> bool:
    """Whether ``key`` belongs to another client than ``role`` (noted as ignored)."""
    if role == "producer" and key in _CONSUMER_ONLY:
        b.note(origin, f"ignored: {key} is a consumer setting, with no meaning for a producer")
        return True
    if role == "consumer" and key in _PRODUCER_ONLY:
        b.note(origin, f"ignored: {key} is a producer setting, with no meaning for a consumer")
        return True
    if role == "admin" and (key in _PRODUCER_ONLY or key in _CONSUMER_ONLY):
        b.note(origin, f"ignored: {key} has no meaning for an admin client")
        return True
    return False


def _consumer_property(b: Builder, client: Client, key: str, value: str, origin: str) -> bool:
    if key in ("group.id", "groupid"):
        if client.mm2:
            b.note(
                origin,
                "ignored: each flow's consumer group is <REPLICATOR_GROUP_PREFIX>.<flow>",
            )
        for cluster in client.clusters:
            cluster.group_id = Offer(client.priority, value.strip(), origin)
        return True
    if key in ("auto.offset.reset", "autooffset.reset"):
        position = start_position(value, origin)
        for cluster in client.clusters:
            if cluster.start_from is None or cluster.start_from.priority <= client.priority:
                cluster.start_from = Offer(client.priority, position, origin)
        return True
    if key == "exclude.internal.topics":
        if parse_bool(value) is False:
            b.note(
                origin,
                "internal topics (__consumer_offsets, __transaction_state, ...) are still never "
                f"copied: the flow's exclusion always holds {DEFAULT_TOPICS_EXCLUDE}",
            )
        else:
            b.note(origin, "internal topics are always excluded here (by the flow's exclusion)")
        return True
    note = _CONSUMER_NOTES.get(key) or next(
        (text for prefix, text in _CONSUMER_PREFIX_NOTES.items() if key.startswith(prefix)), None
    )
    if note is not None:
        b.note(origin, note)
        return True
    return False


def _acks(b: Builder, value: str, origin: str) -> None:
    if value.strip().lower() in ("all", "-1"):
        b.note(origin, "acks=all is what the replicator always uses")
    else:
        b.note(
            origin,
            f"raised to all (from {value.strip()}): the replicator always waits for every "
            "in-sync replica, which is what lets it promise no loss",
        )


def _batch_size(b: Builder, value: str, origin: str) -> None:
    size = parse_int(value, origin)
    if size < 1024:
        b.note(origin, f"raised to 1024 (from {size}): the smallest batch the replicator builds")
        size = 1024
    b.set_global("BATCH_MAX_BYTES", str(size), origin)


def _linger(b: Builder, value: str, origin: str) -> None:
    b.set_global("LINGER_MS", value.strip(), origin)


def _compression(b: Builder, value: str, origin: str) -> None:
    codec = _COMPRESSION.get(value.strip().lower())
    if codec is None:
        raise ConfigError(
            origin,
            f"{value.strip()!r} is not a producer compression: give none, gzip, snappy, lz4 "
            "or zstd ('producer' is a topic or broker setting)",
        )
    b.set_global("COMPRESSION", codec, origin)


def _idempotence(b: Builder, value: str, origin: str) -> None:
    flag = parse_bool(value)
    if flag is None:
        raise ConfigError(origin, f"expected true or false, got {value.strip()!r}")
    b.set_global("IDEMPOTENCE", str(flag).lower(), origin)


# The producer properties translated into a setting (or a note), each by its handler.
_PRODUCER_SETTINGS: dict[str, Callable[[Builder, str, str], None]] = {
    "acks": _acks,
    "request.required.acks": _acks,
    "batch.size": _batch_size,
    "linger.ms": _linger,
    "queue.buffering.max.ms": _linger,
    "compression.type": _compression,
    "compression.codec": _compression,
    "enable.idempotence": _idempotence,
}


def _producer_property(b: Builder, key: str, value: str, origin: str) -> bool:
    handler = _PRODUCER_SETTINGS.get(key)
    if handler is not None:
        handler(b, value, origin)
        return True
    note = _PRODUCER_NOTES.get(key)
    if note is not None:
        b.note(origin, note)
        return True
    return False
