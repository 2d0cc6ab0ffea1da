"""The boundary with aiokafka: client factories and cluster probes.

Every Kafka client the replicator uses is built here from a :class:`ClusterSettings` (so security
options, per-cluster credentials and timeouts are applied in one place); its exceptions are
translated into :mod:`replicator.errors` by :mod:`replicator.kafka.translation`.
What is learnt about a cluster is kept once for it, in its :class:`ClusterClient`: whether it
last answered, and whether it grants idempotent producers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

import aiokafka.errors as kerr
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.conn import create_conn
from aiokafka.helpers import create_ssl_context
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.protocol.commit import OffsetCommitRequest, OffsetFetchRequest

from replicator.config.clusters import ClusterSettings
from replicator.config.settings import Settings
from replicator.config.views import ClientTimings, Timings
from replicator.errors import (
    ClusterUnavailable,
    ReplicatorError,
)
from replicator.kafka import internals
from replicator.kafka.decoding import as_fetched, source_marker
from replicator.kafka.fetch_planner import use_fetch_planner
from replicator.kafka.fetch_sessions import session_client, use_fetch_sessions
from replicator.kafka.membership import MembershipLease, lease_length
from replicator.kafka.retry import Backoff, retrying
from replicator.kafka.roles import LogReader
from replicator.kafka.translation import translate
from replicator.lifecycle import LISTING_MS_PER_PARTITION, close_quietly, walk_interval
from replicator.model.offsets import OutOfRange, out_of_range

log = structlog.get_logger(__name__)

T = TypeVar("T")

# How long a group's coordinator may take to be ready (elected, its offsets loaded) before a read
# or commit of the group's offsets fails with its error, and the pause between attempts.
COORDINATOR_PATIENCE_S = 15.0
_COORDINATOR_BACKOFF_S = 0.25


async def why_unreachable(
    exc: BaseException, cluster: ClusterSettings, timings: Timings
) -> ReplicatorError:
    """``exc`` translated, with the cause a failed bootstrap hides.

    aiokafka's bootstrap logs why each server refused (a password refused, a certificate not
    trusted, a host name that does not match) and raises only "Unable to bootstrap": an
    operator would read "could not reach" where the fix is a credential. When ``exc`` is that
    bootstrap failure, one connection per server is attempted again with the same security
    settings and the first cause found is returned, translated (``AuthenticationFailed``:
    retrying with the same settings cannot help). Costs a connection only on a failure.
    """
    error = translate(exc)
    if not isinstance(exc, kerr.KafkaConnectionError) or "bootstrap" not in str(exc):
        return error
    options = client_options(cluster, timings)
    timeout = timings.probe_timeout_ms / 1000
    for server in cluster.servers:
        host, _, port = server.rpartition(":")
        try:
            connection = await asyncio.wait_for(
                create_conn(
                    host.strip("[]"),
                    int(port),
                    client_id="replicator-diagnosis",
                    request_timeout_ms=timings.probe_timeout_ms,
                    ssl_context=options.get("ssl_context"),
                    security_protocol=options["security_protocol"],
                    sasl_mechanism=options.get("sasl_mechanism", "PLAIN"),
                    sasl_plain_username=options.get("sasl_plain_username"),
                    sasl_plain_password=options.get("sasl_plain_password"),
                ),
                timeout,
            )
        except Exception as cause:  # the answer sought: why this server refused
            found = translate(cause)
            if not isinstance(found, ClusterUnavailable):
                return found
            continue
        connection.close()
    return error


# Clients that do not discover topics (producers, readers, a leg's own consumer) refresh their
# metadata this often at most (Kafka clients' own default): each refresh lists every partition of
# their topics, and they ask again at once when a broker says it no longer leads a partition or
# does not know a topic, or when the replicator learns a new topic or partitions.
STEADY_METADATA_MAX_AGE_MS = 300_000

# How long a consumer's background fetcher sleeps when nothing happens (aiokafka's default is
# 200 ms). Each wake walks every assigned partition, paused ones included, and waits anew on a
# future per paused partition, so an idle consumer of thousands of partitions spent its CPU
# waking; everything that needs a fetch (an answer, a consumed batch, a seek, a resume, a new
# assignment, a broker error that calls for new metadata) wakes it at once.
FETCHER_IDLE_WAKE_MS = 30_000


def client_options(
    cluster: ClusterSettings, timings: Timings, discovers_topics: bool = True
) -> dict[str, Any]:
    """Connection and security options shared by every client of ``cluster``; a client that
    does not discover topics refreshes its metadata less often."""
    age = timings.metadata_max_age_ms
    options: dict[str, Any] = {
        "bootstrap_servers": cluster.servers,
        "security_protocol": cluster.security_protocol.value,
        "request_timeout_ms": timings.request_timeout_ms,
        "metadata_max_age_ms": age if discovers_topics else max(age, STEADY_METADATA_MAX_AGE_MS),
    }
    if cluster.uses_ssl:
        options["ssl_context"] = create_ssl_context(
            cafile=cluster.ssl_cafile,
            certfile=cluster.ssl_certfile,
            keyfile=cluster.ssl_keyfile,
        )
    if cluster.uses_sasl:
        assert cluster.sasl_mechanism is not None and cluster.sasl_password is not None
        options["sasl_mechanism"] = cluster.sasl_mechanism.value
        options["sasl_plain_username"] = cluster.sasl_username
        options["sasl_plain_password"] = cluster.sasl_password.get_secret_value()
    return options


def make_consumer(
    cluster: ClusterSettings,
    settings: Settings,
    group_id: str,
    client_id: str,
    discovers_topics: bool = True,
    instance_id: str | None = None,
) -> AIOKafkaConsumer:
    """A source consumer: manual commits, no automatic offset reset, committed data only;
    a static member of its group under ``instance_id`` (KIP-345), if given.

    Callers always set positions themselves; a position the log no longer holds surfaces as
    :class:`aiokafka.errors.OffsetOutOfRangeError` (see :func:`out_of_range_positions`) and is
    handled by the configured policy, never silently reset. ``read_committed``: records of
    aborted transactions are never replicated and control records never appear; an open
    transaction holds back only its own partition (at its last stable offset).
    """
    return AIOKafkaConsumer(
        **client_options(cluster, settings, discovers_topics),
        client_id=client_id,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="none",
        isolation_level="read_committed",
        fetch_max_bytes=settings.fetch_max_bytes,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_partition_fetch_bytes=settings.max_partition_fetch_bytes,
        consumer_timeout_ms=FETCHER_IDLE_WAKE_MS,
        key_deserializer=source_marker(),  # the data path: records unwrapped, or bytes (native)
        group_instance_id=instance_id,
        **group_timings(settings),
    )


def group_timings(settings: Settings) -> dict[str, int]:
    """A group member's session (``REPLICATOR_GROUP_SESSION_TIMEOUT_MS``), heartbeats three per
    session at most every 3 s (Kafka's defaults), and the rebalance timeout: how long the group
    waits for its members to rejoin, the session's but 5 s inside the request timeout (a join
    is one request, answered when the rebalance ends)."""
    session = settings.group_session_timeout_ms
    return {
        "session_timeout_ms": session,
        "heartbeat_interval_ms": min(3000, session // 3),
        "rebalance_timeout_ms": max(1000, min(session, settings.request_timeout_ms - 5000)),
    }


def membership_lease(settings: Settings, group: str) -> MembershipLease:
    """The lease of this replica's membership of ``group`` (:mod:`replicator.kafka.
    membership`): its instance id, and a length that fits the group's timings."""
    timings = group_timings(settings)
    length = lease_length(
        timings["session_timeout_ms"],
        timings["heartbeat_interval_ms"],
        timings["rebalance_timeout_ms"],
    )
    return MembershipLease(group, length, settings.instance_id)


def make_reader(
    cluster: ClusterSettings,
    settings: Settings,
    client_id: str,
    fetch_max_wait_ms: int = 10,
    data_path: bool = False,
) -> LogReader:
    """A consumer of no group that reads ranges of a destination (the resume scan, the
    heartbeat watch): by default fetches answer at once at the log end, so the end is known
    without waiting. A fetch response is bounded to one partition's worth in all, however many
    partitions share the fetch: some brokers answer past the per-partition bound, and decoding
    a large answer to read a few records costs tens of milliseconds (measured on the embedded
    broker: 85 ms per positioned read at the default 50 MB, 2.4 ms at 128 KB).

    ``data_path``: a reader on the data path (the resume scan) gets its records as decoded
    (:mod:`replicator.kafka.decoding`); any other gets aiokafka's ``ConsumerRecord``."""
    reader: LogReader = AIOKafkaConsumer(
        **client_options(cluster, settings, discovers_topics=False),
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=fetch_max_wait_ms,
        fetch_max_bytes=settings.max_partition_fetch_bytes,
        max_partition_fetch_bytes=settings.max_partition_fetch_bytes,
        consumer_timeout_ms=FETCHER_IDLE_WAKE_MS,
        key_deserializer=as_fetched if data_path else None,
    )
    return reader


async def committed_offsets(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition]
) -> dict[TopicPartition, tuple[int | None, str]]:
    """The group's committed offset and its metadata for each of ``partitions``, one request.

    aiokafka's ``committed()`` answers one partition and drops the metadata.
    """
    found = await internals.fetch_committed(consumer, partitions)
    result: dict[TopicPartition, tuple[int | None, str]] = {}
    for tp in partitions:
        point = found.get(tp)
        offset = None if point is None or point.offset < 0 else int(point.offset)
        result[tp] = (offset, (point.metadata or "") if point is not None else "")
    return result


def answered_at(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """When ``consumer`` last had a fetch answer for assigned partition ``tp`` (ms), if ever: one
    that named it, or an answer of its fetch session that left it out at its position (nothing
    new there, :meth:`~replicator.kafka.fetch_sessions.SessionClient.quiet_since`)."""
    polled: int | None = None
    with contextlib.suppress(AssertionError, AttributeError):
        polled = consumer.last_poll_timestamp(tp)
    sessions = session_client(consumer)
    position = internals.fetched_position(consumer, tp)
    if sessions is None or position is None:
        return polled
    quiet = sessions.quiet_since(tp, position)
    return polled if quiet is None or (polled is not None and polled >= quiet) else quiet


def fetched_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """Where ``consumer`` fetches ``tp`` next, known without a request (``None``: unknown).
    Past the last record handed over when a fetch ended in transaction markers or aborted
    records, which a ``read_committed`` consumer never hands over."""
    return internals.fetched_position(consumer, tp)


def set_fetch_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """Change how long ``consumer``'s next fetches wait for data (aiokafka fixes it at start)."""
    internals.set_fetch_wait(consumer, wait_ms)


def known_topics(consumer: AIOKafkaConsumer, within_s: float) -> set[str] | None:
    """The topics in ``consumer``'s own metadata, if refreshed in the last ``within_s`` seconds.

    A consumer subscribed to a pattern refreshes every topic's metadata each
    ``metadata_max_age_ms`` anyway: listing the cluster from that costs no request (a listing
    of thousands of partitions takes tens of milliseconds to decode). ``None`` when the metadata
    is older: ask the cluster, which says why it cannot answer.
    """
    if internals.metadata_age_s(consumer) > within_s:
        return None
    topics: set[str] = internals.kafka_client(consumer).cluster.topics()
    return topics


def pace_metadata(consumer: AIOKafkaConsumer, every_s: float) -> float:
    """Refresh ``consumer``'s metadata every ``every_s``, or less often when it lists very many
    partitions (:func:`replicator.lifecycle.walk_interval`); the interval set, in seconds."""
    partitions = internals.metadata_partitions(consumer)
    interval = walk_interval(every_s, partitions, LISTING_MS_PER_PARTITION)
    internals.set_metadata_max_age(consumer, int(interval * 1000))
    return interval


def on_metadata(consumer: AIOKafkaConsumer, listener: Callable[[], None]) -> None:
    """Call ``listener`` after each refresh of ``consumer``'s metadata."""
    internals.kafka_client(consumer).cluster.add_listener(lambda _cluster: listener())


def assign_keeping_topics(consumer: AIOKafkaConsumer, partitions: Iterable[TopicPartition]) -> None:
    """Assign ``consumer`` exactly ``partitions``, its metadata still covering every topic it
    covered (a metadata request only for topics new to it).

    aiokafka's ``assign`` makes the client's metadata cover the assigned topics only: a
    ListOffsets in flight on the same client for a topic dropped so (the destination reader's
    log bounds, asked while its reads are assigned afresh) then learns the topics it lost again
    one metadata request at a time (measured: 30 s for 1,000 topics at a start).
    """
    tracked = internals.tracked_topics(consumer)
    partitions = list(partitions)
    consumer.assign(partitions)
    internals.set_tracked_topics(consumer, tracked | {tp.topic for tp in partitions})


async def track_topics(client: AIOKafkaClient, topics: Iterable[str]) -> None:
    """Make ``client``'s metadata cover ``topics`` from now on, with one metadata request for
    those it did not track (aiokafka shares one update among the topics added meanwhile).

    aiokafka's ListOffsets (``beginning_offsets``, ``end_offsets``) learns an unknown topic by
    failing on it and retrying: one metadata request per unknown topic, in turn.
    """
    await asyncio.gather(*(client.add_topic(topic) for topic in topics))


async def start_consumer(
    cluster: ClusterSettings,
    settings: Settings,
    group_id: str,
    client_id: str,
    discovers_topics: bool = True,
    lease: MembershipLease | None = None,
) -> AIOKafkaConsumer:
    """A started :func:`make_consumer`, fetching through incremental fetch sessions
    (:mod:`replicator.kafka.fetch_sessions`: a fetch names only the partitions that changed),
    its fetches planned at a cost in proportion to what changed
    (:mod:`replicator.kafka.fetch_planner`: paused partitions cost nothing at a wake); one that
    failed to start is closed before the error is raised (the caller retries with a
    new one). With a ``lease``, a member of its group under the lease's instance id, telling
    the lease of each heartbeat and assignment (:mod:`replicator.kafka.membership`)."""
    instance_id = None if lease is None else lease.instance_id
    consumer = make_consumer(cluster, settings, group_id, client_id, discovers_topics, instance_id)
    try:
        await consumer.start()
    except BaseException as exc:
        await close_quietly(consumer.stop())
        if isinstance(exc, Exception):
            raise await why_unreachable(exc, cluster, settings) from exc
        raise
    if lease is not None:  # before it subscribes: its first join comes after
        internals.install_membership(consumer, lease)
    use_fetch_sessions(consumer)
    use_fetch_planner(consumer)
    return consumer


def out_of_range_positions(exc: BaseException) -> dict[TopicPartition, int] | None:
    """The positions a fetch found outside the log, if ``exc`` is OFFSET_OUT_OF_RANGE."""
    if isinstance(exc, kerr.OffsetOutOfRangeError) and exc.args and isinstance(exc.args[0], dict):
        return dict(exc.args[0])
    return None


def lacks_position(exc: BaseException) -> bool:
    """Whether ``exc`` says a partition had no position yet (raised for a partition between its
    assignment and the rebalance listener setting its position: nothing to handle)."""
    return isinstance(exc, kerr.NoOffsetForPartitionError)


async def check_position(
    consumer: AIOKafkaConsumer, tp: TopicPartition, position: int
) -> OutOfRange | None:
    """Whether the source log still holds ``position``.

    The log start comes from the broker; the log end from the last fetch response (some brokers
    answer ListOffsets(LATEST) wrongly), else from the broker.
    """
    start: int = (await consumer.beginning_offsets([tp]))[tp]
    end: int | None = consumer.highwater(tp)
    if end is None:
        end = (await consumer.end_offsets([tp]))[tp]
    return out_of_range(position, start, end)


def idempotence_refused(exc: BaseException) -> bool:
    """Whether a producer failed to start because the broker refused it a producer id
    (``InitProducerId``), not because the cluster was unreachable."""
    unreachable = (kerr.KafkaConnectionError, kerr.NodeNotReadyError, kerr.RequestTimedOutError)
    return (
        isinstance(exc, kerr.KafkaError)
        and not isinstance(exc, unreachable)
        and not isinstance(exc, (kerr.AuthenticationFailedError, kerr.SaslAuthenticationFailed))
    )


def make_admin(cluster: ClusterSettings, timings: Timings, client_id: str) -> AIOKafkaAdminClient:
    options = client_options(cluster, timings)
    options.pop("metadata_max_age_ms")
    return AIOKafkaAdminClient(**options, client_id=client_id)


class ClusterClient:
    """A lazily connected admin client of one cluster, and whether the cluster last answered.

    Connecting is retried on use, so a cluster that is down at start-up (or later) is reported,
    not fatal, and is picked up again when it returns.
    """

    def __init__(
        self, alias: str, cluster: ClusterSettings, timings: ClientTimings, idempotence: bool = True
    ) -> None:
        self.alias = alias
        self.cluster = cluster
        self._timings = timings
        self._admin: AIOKafkaAdminClient | None = None
        self._lock = asyncio.Lock()
        self.error: str | None = "not contacted yet"
        self.retriable = True  # whether the last error may go away by itself
        # Whether producers made for this cluster ask for idempotence (REPLICATOR_IDEMPOTENCE):
        # until the cluster refuses one a producer id, learnt once here for every leg and
        # heartbeat that writes to it (:meth:`producer_failed`).
        self.idempotence = idempotence

    async def admin(self) -> AIOKafkaAdminClient:
        """The connected admin client; raises a translated error if the cluster is unreachable."""
        async with self._lock:
            if self._admin is None:
                admin = make_admin(self.cluster, self._timings, f"replicator-admin-{self.alias}")
                try:
                    await admin.start()
                except BaseException as exc:
                    await close_quietly(admin.close())
                    if isinstance(exc, Exception):
                        raise await why_unreachable(exc, self.cluster, self._timings) from exc
                    raise
                self._admin = admin
            return self._admin

    async def probe(self) -> None:
        """Ask a broker of the cluster to answer; record the outcome in :attr:`error`.

        Bounded by ``REPLICATOR_PROBE_TIMEOUT_MS``, far below the request timeout: a cluster
        behind a link that silently drops packets (connections open, nothing answered) is
        reported within seconds."""
        timeout = self._timings.probe_timeout_ms / 1000
        client: AIOKafkaClient | None = None
        node: int | None = None
        try:
            async with asyncio.timeout(timeout):  # one bound over connecting, finding, asking
                admin = await self.admin()
                client = internals.kafka_client(admin)
                node = await internals.a_broker(client)
                # A broker answers, and nothing to decode: describe_cluster() asks for every
                # topic (thousands of partitions decoded at every probe), and some brokers answer
                # a metadata request naming no topic with all of them too (the embedded one
                # does: 40 ms of CPU per probe at 6,000 partitions). On a connection of its own,
                # so that it never waits behind the admin requests in flight (a start's topic
                # creation).
                await client.send(node, ApiVersionRequest(), group=ConnectionGroup.COORDINATION)
        except TimeoutError:
            self.error = (
                f"no answer within {timeout:g} s (REPLICATOR_PROBE_TIMEOUT_MS): "
                f"could not reach {self.bootstrap_servers}"
            )
            self.retriable = True
            if client is not None and node is not None:
                # The next probe asks afresh, not behind the request that got no answer.
                internals.drop_connection(client, node, ConnectionGroup.COORDINATION)
            return
        except Exception as exc:  # kept in self.error: the caller logs it once per change
            error = translate(exc)
            self.error = self.describe_failure(error, exc)
            self.retriable = error.retriable
            await self.reset()
            return
        self.error = None
        self.retriable = True

    def producer_failed(self, exc: BaseException) -> None:
        """A producer made for this cluster failed to start with ``exc``: if the cluster refused
        it a producer id (:func:`idempotence_refused`), its producers go without idempotence from
        now on. Learnt, and said in one error line, once for the cluster."""
        if not (self.idempotence and idempotence_refused(exc)):
            return
        self.idempotence = False
        log.error(
            "the cluster refused an idempotent producer (InitProducerId answered "
            f"{type(exc).__name__}): its producers go without; a batch whose outcome is unknown "
            "resumes from the destination's tail instead of being retried",
            cluster=self.alias,
        )

    @property
    def bootstrap_servers(self) -> str:
        """Where this cluster is contacted (host:port list; never holds credentials)."""
        return self.cluster.bootstrap_servers

    def describe_failure(self, error: ReplicatorError, exc: BaseException) -> str:
        """One line for logs, ``/status`` and ``check-config``: what failed, and where.

        The cause alone (``KafkaConnectionError``) does not tell an operator which address is
        wrong; the bootstrap servers do, and they hold no secret.
        """
        cause = str(error) or type(exc).__name__
        if isinstance(error, ClusterUnavailable):
            hint = ""
            if self.cluster.uses_ssl and self.cluster.ssl_certfile is None:
                # A broker that requires client certificates (ssl.client.auth=required) ends
                # the TLS 1.3 session after the handshake: to the client, a closed connection.
                hint = (
                    " (TLS without a client certificate: if the brokers require one, set "
                    f"REPLICATOR_CLUSTERS__{self.alias.upper()}__SSL_CERTFILE and _SSL_KEYFILE)"
                )
            return f"{cause}: could not reach {self.bootstrap_servers}{hint}"
        return f"{cause} (at {self.bootstrap_servers})"

    async def reset(self) -> None:
        async with self._lock:
            if self._admin is not None:
                await close_quietly(self._admin.close())
                self._admin = None

    async def close(self) -> None:
        await self.reset()


class GroupOffsets:
    """The committed offsets of a group no consumer joins, read and written at its coordinator.

    Plain OffsetFetch and OffsetCommit requests (generation -1, no member), as Kafka allows for
    groups without members; no group machinery runs in the background. A coordinator not ready
    yet (being elected or loading the group's offsets: a group's first use on a new cluster, a
    broker restart) is asked again for up to :data:`COORDINATOR_PATIENCE_S`, as Kafka's own
    clients do, before its error is raised.
    """

    def __init__(self, owner: AIOKafkaConsumer | AIOKafkaAdminClient, group: str) -> None:
        """Read and write ``group``'s offsets through the client of ``owner`` (a started
        consumer or admin client of the cluster)."""
        self._client = internals.kafka_client(owner)
        self.group = group

    async def fetch(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Each partition's committed offset (``None``: none committed)."""
        found = await self.fetch_with_metadata(partitions)
        return {tp: None if entry is None else entry[0] for tp, entry in found.items()}

    async def fetch_with_metadata(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, str] | None]:
        """Each partition's committed offset with the metadata committed with it (``""``: none,
        or a broker that does not keep it); ``None``: none committed."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        request = OffsetFetchRequest(self.group, list(by_topic.items()))
        return await self._patiently("read", lambda: self._fetch(request, partitions))

    async def _fetch(
        self, request: Any, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, str] | None]:
        response = await self._send(request)
        # v2+: a group-level error (coordinator loading, not authorised) comes with no topics;
        # read as "no offsets" it would look like a group that never committed.
        code = getattr(response, "error_code", 0)
        if code:
            raise kerr.for_code(code)()
        found: dict[TopicPartition, tuple[int, str] | None] = dict.fromkeys(partitions)
        for topic, answers in response.topics:
            for partition, offset, metadata, code in answers:
                if code and kerr.for_code(code) is not kerr.UnknownTopicOrPartitionError:
                    raise kerr.for_code(code)()
                if offset >= 0:
                    found[TopicPartition(topic, partition)] = (int(offset), metadata or "")
        return found

    async def commit(
        self, offsets: dict[TopicPartition, int], metadata: dict[TopicPartition, str] | None = None
    ) -> None:
        by_topic: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
        for tp, offset in offsets.items():
            by_topic[tp.topic].append((tp.partition, offset, (metadata or {}).get(tp, "")))
        request = OffsetCommitRequest(
            self.group,
            OffsetCommitRequest.DEFAULT_GENERATION_ID,
            "",
            OffsetCommitRequest.DEFAULT_RETENTION_TIME,
            list(by_topic.items()),
        )
        await self._patiently("commit", lambda: self._commit(request))

    async def _commit(self, request: Any) -> None:
        response = await self._send(request)
        for _topic, answers in response.topics:
            for _partition, code in answers:
                if code:
                    raise kerr.for_code(code)()

    async def _patiently(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt``, asked again while it fails for a retriable reason (a coordinator not
        ready, a timeout), for up to :data:`COORDINATOR_PATIENCE_S`; a refusal is raised at once."""
        answer = await retrying(
            attempt,
            stop=asyncio.Event(),  # bounded by time, not by a stop: callers bound it further
            what=f"{what} the offsets of group {self.group}",
            log=log,
            persistent=False,
            backoff=Backoff(base=_COORDINATOR_BACKOFF_S),
            within=COORDINATOR_PATIENCE_S,
        )
        return cast(T, answer)

    async def _send(self, request: Any) -> Any:
        await internals.a_broker(self._client)  # the lookup asks a random broker: one listed
        coordinator = await self._client.coordinator_lookup(CoordinationType.GROUP, self.group)
        return await self._client.send(coordinator, request, group=ConnectionGroup.COORDINATION)
