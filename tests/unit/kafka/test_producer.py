"""The destination producer's choices that need no broker: which InitProducerId it sends, which
failures mean a batch may have been written, and whether a cluster grants idempotence (learnt
once per cluster)."""

from __future__ import annotations

import aiokafka.errors as kerr
from aiokafka import TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder, MessageBatch
from aiokafka.producer.transaction_manager import TransactionManager
from structlog.testing import capture_logs

from replicator.config.loading import load_settings
from replicator.errors import (
    OutcomeUnknown,
    ProducerStateLost,
    RecordRefused,
    ReplicatorError,
    TopicGone,
)
from replicator.kafka.clients import ClusterClient
from replicator.kafka.internals import InitProducerId, _new_producer_id
from replicator.kafka.producer import _never_retry, idempotence_refused, outcome_error


def unknown_outcome(exc: BaseException) -> bool:
    """Whether the partition resumes from the destination's tail after ``exc``."""
    return isinstance(outcome_error(exc), OutcomeUnknown)


def test_init_producer_id_uses_the_highest_version_both_sides_know() -> None:
    request = InitProducerId(None, 60_000)
    assert request.prepare({22: (0, 5)}).API_VERSION == 4
    assert request.prepare({22: (0, 3)}).API_VERSION == 3
    assert request.prepare({22: (0, 2)}).API_VERSION == 0  # older brokers: aiokafka's own v0
    assert request.prepare({}).API_VERSION == 0


def test_a_new_producer_asks_with_no_id_and_no_epoch() -> None:
    struct = InitProducerId(None, 60_000).prepare({22: (0, 4)})
    assert (struct.transactional_id, struct.producer_id, struct.producer_epoch) == (None, -1, -1)


def test_failures_after_which_a_batch_may_be_in_the_destination() -> None:
    """No answer, or an error a broker gives after appending the batch: an ``acks=all`` produce
    is answered once replicated, and a partition led elsewhere by then (or an offline log
    directory) makes the answer NOT_LEADER_OR_FOLLOWER (KAFKA_STORAGE_ERROR) with the batch in
    the log. Apache Kafka 4.3 answered so for batches it had written, thawed after a freeze."""
    for maybe in (
        kerr.KafkaConnectionError(),
        kerr.RequestTimedOutError(),
        kerr.NotEnoughReplicasAfterAppendError(),
        kerr.NotLeaderForPartitionError(),
        kerr.KafkaStorageError(),
        OutcomeUnknown("queued behind"),
    ):
        assert unknown_outcome(maybe), maybe
    for not_written in (
        kerr.NotEnoughReplicasError(),  # refused before the append
        kerr.LeaderNotAvailableError(),
        kerr.MessageSizeTooLargeError(),
    ):
        assert not unknown_outcome(not_written), not_written


def test_only_a_producer_that_is_not_idempotent_leaves_a_maybe_written_batch_unretried() -> None:
    """aiokafka retries NOT_LEADER_OR_FOLLOWER: an idempotent producer's retry is dropped by the
    broker if the batch was written; any other producer's would write it twice."""
    maybe = kerr.NotLeaderForPartitionError()
    assert _never_retry(maybe, idempotent=False)
    assert not _never_retry(maybe, idempotent=True)
    assert not _never_retry(kerr.LeaderNotAvailableError(), idempotent=False)
    assert _never_retry(kerr.UnknownTopicOrPartitionError(), idempotent=True)  # never blindly


def test_only_a_refused_producer_id_turns_idempotence_off() -> None:
    assert idempotence_refused(kerr.UnknownError())
    assert idempotence_refused(kerr.ClusterAuthorizationFailedError())
    assert not idempotence_refused(kerr.KafkaConnectionError())  # unreachable: try again
    assert not idempotence_refused(kerr.SaslAuthenticationFailed())
    assert not idempotence_refused(OSError("refused"))


def cluster_client(**env: str) -> ClusterClient:
    settings = load_settings(
        {
            "REPLICATOR_LOCAL_CLUSTER": "dc1",
            "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "a:1",
            "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "b:1",
            **env,
        }
    )
    return ClusterClient(
        "dc2", settings.clusters["dc2"], settings.client_timings(), settings.idempotence
    )


def test_a_refused_producer_id_is_learnt_once_for_the_cluster() -> None:
    """Every leg and heartbeat writing to a cluster makes its producers from what its
    ClusterClient learnt: refused once, none of them asks again, and one error line says so."""
    client = cluster_client()
    assert client.idempotence
    with capture_logs() as logs:
        client.producer_failed(kerr.KafkaConnectionError())  # unreachable: asked again
        assert client.idempotence
        client.producer_failed(kerr.UnknownError())
        client.producer_failed(kerr.UnknownError())  # a second producer of the same cluster
    assert not client.idempotence
    said = [e for e in logs if "refused an idempotent producer" in e["event"]]
    assert len(said) == 1 and said[0]["log_level"] == "error" and said[0]["cluster"] == "dc2"
    assert "UnknownError" in said[0]["event"]


def test_a_cluster_not_asked_for_idempotence_learns_nothing() -> None:
    client = cluster_client(REPLICATOR_IDEMPOTENCE="false")
    with capture_logs() as logs:
        client.producer_failed(kerr.UnknownError())
    assert not client.idempotence and not logs


def test_a_destination_that_lost_the_producer_or_the_topic_makes_the_partition_resume() -> None:
    """Nothing was written, but the destination's state changed under the producer (restored
    empty, topic gone): the partition reads the destination again instead of halting."""
    for lost in (
        kerr.UnknownProducerId(),
        kerr.OutOfOrderSequenceNumber(),
        kerr.UnknownTopicOrPartitionError(),
    ):
        assert unknown_outcome(lost), lost


def test_every_outcome_is_said_in_the_products_terms_with_the_clusters_name_for_it() -> None:
    """The sender sees errors of the product's tree only; the cluster's own name for the answer
    is kept as the kind counted in ``replicator_send_errors_total{error}``."""
    said: list[tuple[BaseException, type[ReplicatorError], str]] = [
        (kerr.UnknownTopicOrPartitionError(), TopicGone, "UnknownTopicOrPartitionError"),
        (kerr.UnknownProducerId(), ProducerStateLost, "UnknownProducerId"),
        (kerr.OutOfOrderSequenceNumber(), ProducerStateLost, "OutOfOrderSequenceNumber"),
        (kerr.RequestTimedOutError(), OutcomeUnknown, "OutcomeUnknown"),
    ]
    for exc, kind, name in said:
        error = outcome_error(exc)
        assert type(error) is kind, (exc, error)
        assert isinstance(error, OutcomeUnknown), error
        assert error.kind == name, (exc, error.kind)
    assert isinstance(outcome_error(kerr.MessageSizeTooLargeError()), RecordRefused)
    queued = OutcomeUnknown("queued behind")
    assert outcome_error(queued) is queued


def _batch(producer_id: int) -> MessageBatch:
    """A batch as aiokafka's sender sends it: built, then numbered with ``producer_id``."""
    builder = BatchBuilder(1 << 16, 0)
    builder.append(key=b"k", value=b"v", timestamp=None)
    builder._set_producer_state(producer_id, 0, 0)
    return MessageBatch(TopicPartition("orders", 0), builder, ttl=60, linger_time=0)


async def test_a_lost_producer_id_is_replaced_once() -> None:
    """The first batch refused for an unknown producer id makes the producer ask for a new id
    and number every partition from 0; later refusals of batches sent with the old id do not
    reset the new one."""
    manager = TransactionManager(None, 60_000)
    manager.set_pid_and_epoch(7, 0)
    manager.increment_sequence_number(TopicPartition("orders", 0), 40)
    sender = type("Sender", (), {"_txn_manager": manager})()
    _new_producer_id(sender, _batch(7))
    assert not manager.has_pid()
    assert manager.sequence_number(TopicPartition("orders", 0)) == 0
    manager.set_pid_and_epoch(8, 0)  # what the sender's next InitProducerId gets
    manager.increment_sequence_number(TopicPartition("orders", 0), 5)
    _new_producer_id(sender, _batch(7))  # another partition's batch of the old id
    assert manager.producer_id == 8
    assert manager.sequence_number(TopicPartition("orders", 0)) == 5


class _Leaders:
    """Cluster metadata as the accumulator asks it: every partition led by node 0."""

    def leader_for_partition(self, tp: TopicPartition) -> int:
        return 0


async def test_a_node_takes_several_requests_but_a_partition_one_at_a_time() -> None:
    """A batch ready for a partition goes out while another partition's request to the same
    node is still in flight (up to the limit), never while its own partition's is: aiokafka's
    own drain, asked with the sender's requests in flight."""
    from aiokafka.producer.message_accumulator import MessageAccumulator

    from replicator.kafka.internals import REQUESTS_PER_NODE, NodeRequests

    accumulator = MessageAccumulator(_Leaders(), 1 << 20, 0, float("inf"))
    in_flight = NodeRequests(REQUESTS_PER_NODE)
    tps = [TopicPartition("t", p) for p in range(REQUESTS_PER_NODE + 2)]

    def ready(tp: TopicPartition) -> None:
        builder = BatchBuilder(1 << 20, 0)
        builder.append(timestamp=None, key=None, value=b"v")
        accumulator._append_batch(builder, tp)

    muted: set[TopicPartition] = set()
    for tp in tps[:REQUESTS_PER_NODE]:  # each ready while the requests before it travel
        ready(tp)
        drained, _ = accumulator.drain_by_nodes(ignore_nodes=in_flight, muted_partitions=muted)
        assert list(drained[0]) == [tp]
        in_flight.add(0)
        muted.add(tp)
    ready(tps[0])  # its own request is in flight: it waits, whatever the node takes
    ready(tps[-1])  # the node has its limit in flight: it waits
    drained, _ = accumulator.drain_by_nodes(ignore_nodes=in_flight, muted_partitions=muted)
    assert drained == {}
    in_flight.remove(0)  # one answered (another partition's): the other partition goes
    drained, _ = accumulator.drain_by_nodes(ignore_nodes=in_flight, muted_partitions=muted)
    assert list(drained[0]) == [tps[-1]] and in_flight.in_flight(0) == REQUESTS_PER_NODE - 1
