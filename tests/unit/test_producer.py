"""The destination producer's choices that need no broker: which InitProducerId it sends, and
which failures mean a batch may have been written."""

from __future__ import annotations

import aiokafka.errors as kerr

from replicator.producer import (
    OutcomeUnknown,
    _InitProducerId,
    idempotence_refused,
    unknown_outcome,
)


def test_init_producer_id_uses_the_highest_version_both_sides_know() -> None:
    request = _InitProducerId(None, 60_000)
    assert request.prepare({22: (0, 5)}).API_VERSION == 4
    assert request.prepare({22: (0, 3)}).API_VERSION == 3
    assert request.prepare({22: (0, 2)}).API_VERSION == 0  # older brokers: aiokafka's own v0
    assert request.prepare({}).API_VERSION == 0


def test_a_new_producer_asks_with_no_id_and_no_epoch() -> None:
    struct = _InitProducerId(None, 60_000).prepare({22: (0, 4)})
    assert (struct.transactional_id, struct.producer_id, struct.producer_epoch) == (None, -1, -1)


def test_failures_after_which_a_batch_may_be_in_the_destination() -> None:
    for maybe in (
        kerr.KafkaConnectionError(),
        kerr.RequestTimedOutError(),
        kerr.NotEnoughReplicasAfterAppendError(),
        OutcomeUnknown("queued behind"),
    ):
        assert unknown_outcome(maybe), maybe
    for not_written in (kerr.NotLeaderForPartitionError(), kerr.MessageSizeTooLargeError()):
        assert not unknown_outcome(not_written), not_written


def test_only_a_refused_producer_id_turns_idempotence_off() -> None:
    assert idempotence_refused(kerr.UnknownError())
    assert idempotence_refused(kerr.ClusterAuthorizationFailedError())
    assert not idempotence_refused(kerr.KafkaConnectionError())  # unreachable: try again
    assert not idempotence_refused(kerr.SaslAuthenticationFailed())
    assert not idempotence_refused(OSError("refused"))
