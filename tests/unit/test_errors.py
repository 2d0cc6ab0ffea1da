"""The error tree: aiokafka's errors translated at one boundary, each with its retriable flag."""

from __future__ import annotations

import ast
import ssl
from pathlib import Path

import aiokafka.errors as kerr
import pytest

import replicator.errors as errors_module
from replicator.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    ClusterUnavailable,
    ConfigError,
    KafkaFailure,
    OutcomeUnknown,
    ProducerStateLost,
    RecordRefused,
    ReplicatorError,
    TopicError,
    TopicGone,
    TopicMismatch,
    TopicMissing,
    TopicNotListedYet,
    TopicRefused,
)
from replicator.kafka.translation import broker_error, denial, error_name, translate
from replicator.topics.provisioning import creation_failure, describe_errors, partition_shortfall

_ERROR_CLASSES = {
    name
    for name, value in vars(errors_module).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


@pytest.mark.parametrize(
    "error",
    [
        kerr.TopicAuthorizationFailedError(),
        kerr.GroupAuthorizationFailedError(),
        kerr.ClusterAuthorizationFailedError(),
        kerr.TransactionalIdAuthorizationFailed(),
    ],
)
def test_authorization_failures_are_their_own_class_and_not_retriable(error: Exception) -> None:
    translated = translate(error)
    assert type(translated) is AuthorizationFailed
    assert not translated.retriable
    assert type(error).__name__ in str(translated)


@pytest.mark.parametrize(
    "error",
    [kerr.SaslAuthenticationFailed(), kerr.AuthenticationFailedError(), ssl.SSLError("bad cert")],
)
def test_authentication_failures_stay_apart_from_authorization(error: Exception) -> None:
    translated = translate(error)
    assert type(translated) is AuthenticationFailed
    assert not translated.retriable


@pytest.mark.parametrize(
    ("error", "kind", "retriable"),
    [
        (kerr.KafkaConnectionError(), ClusterUnavailable, True),
        (kerr.RequestTimedOutError(), ClusterUnavailable, True),
        (ConnectionRefusedError(), ClusterUnavailable, True),
        (TimeoutError(), ClusterUnavailable, True),
        (kerr.MessageSizeTooLargeError(), RecordRefused, False),
        (kerr.InvalidTopicError(), RecordRefused, False),
        (kerr.NotLeaderForPartitionError(), KafkaFailure, True),
        (kerr.UnknownError(), KafkaFailure, False),
        (ValueError("odd"), KafkaFailure, False),
    ],
)
def test_everything_else_maps_as_before(
    error: Exception, kind: type[ReplicatorError], retriable: bool
) -> None:
    translated = translate(error)
    assert type(translated) is kind
    assert translated.retriable is retriable


def test_the_replicators_own_errors_pass_through_unchanged() -> None:
    refused = TopicRefused("cannot create orders", retriable=True)
    assert translate(refused) is refused


def test_retriable_flags_of_the_tree() -> None:
    assert TopicMissing("orders not in metadata yet").retriable
    assert TopicNotListedYet("orders created, not listed yet").retriable
    assert isinstance(TopicNotListedYet("t"), TopicMissing)
    assert ClusterUnavailable("down").retriable
    for error in (
        AuthorizationFailed("denied"),
        AuthenticationFailed("bad password"),
        TopicMismatch("too few partitions"),
        TopicRefused("invalid config"),
        RecordRefused("too large"),
        ConfigError("REPLICATOR_X", "bad"),
        # The partition resumes from the destination instead of retrying the batch.
        OutcomeUnknown("no answer"),
        TopicGone("gone", kind="UnknownTopicOrPartitionError"),
        ProducerStateLost("restored", kind="UnknownProducerId"),
    ):
        assert not error.retriable, type(error).__name__
    assert TopicRefused("controller moved", retriable=True).retriable
    assert not TopicRefused("controller moved", retriable=False).retriable
    assert KafkaFailure("x", retriable=True).retriable


def test_topic_errors_share_a_base_and_only_a_mismatch_is_a_mismatch() -> None:
    # The sender blocks a partition on TopicMismatch and treats every other error by its flag.
    for error in (TopicMissing("m"), TopicRefused("r"), TopicMismatch("p")):
        assert isinstance(error, TopicError)
    assert not isinstance(TopicRefused("r"), TopicMismatch)
    assert not isinstance(TopicMissing("m"), TopicMismatch)


def test_every_class_is_drawn_in_the_module_docstring() -> None:
    doc = errors_module.__doc__ or ""
    classes = [
        value
        for value in vars(errors_module).values()
        if isinstance(value, type) and issubclass(value, BaseException)
    ]
    assert len(classes) == 29
    for cls in classes:
        assert f" {cls.__name__} " in doc, cls.__name__
    assert not issubclass(errors_module.Stopped, ReplicatorError)  # no failure handler takes it


def test_every_exception_class_of_the_product_is_in_the_tree() -> None:
    """No module defines an exception class of its own: the tree is the whole list."""
    root = Path(errors_module.__file__).parent
    elsewhere: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "errors.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                (
                    isinstance(base, (ast.Name, ast.Attribute))
                    and ast.unparse(base).split(".")[-1].endswith(("Error", "Exception", "Failure"))
                )
                or ast.unparse(base).split(".")[-1] in _ERROR_CLASSES
                for base in node.bases
            ):
                elsewhere.append(f"{path.relative_to(root.parent)}: {node.name}")
    assert not elsewhere, "exception classes outside replicator/errors.py:\n" + "\n".join(elsewhere)


def test_broker_error_codes() -> None:
    assert error_name(29) == "TopicAuthorizationFailedError"
    assert type(broker_error(29)) is AuthorizationFailed
    assert type(broker_error(31)) is AuthorizationFailed
    assert broker_error(41).retriable  # NotController
    assert not broker_error(38).retriable  # InvalidReplicationFactor


# -- what provisioning.py makes of a CreateTopics answer ---------------------------------------


def test_a_created_topic_is_no_failure() -> None:
    assert creation_failure("orders", []) is None


def test_a_refused_creation_is_not_retriable_and_says_why() -> None:
    failure = creation_failure("orders", [(38, "Replication factor: 3 larger than brokers: 1")])
    assert type(failure) is TopicRefused
    assert not failure.retriable
    assert str(failure) == (
        "cannot create orders: InvalidReplicationFactorError (error 38): "
        "Replication factor: 3 larger than brokers: 1"
    )


def test_a_creation_refused_for_a_passing_reason_is_retriable() -> None:
    failure = creation_failure("orders", [(41, None)])  # NotController: the controller moved
    assert type(failure) is TopicRefused
    assert failure.retriable
    # One lasting error among passing ones makes the refusal lasting.
    mixed = creation_failure("orders", [(41, None), (40, "bad config")])
    assert mixed is not None and not mixed.retriable


def test_a_creation_denied_by_acls_is_an_authorization_failure() -> None:
    failure = creation_failure("orders", [(29, "Authorization failed.")], "dc2")
    assert type(failure) is AuthorizationFailed
    assert not failure.retriable and failure.named
    assert str(failure) == "Create on topic orders denied by the ACLs of dc2"


def test_broker_errors_are_described_by_name_and_code() -> None:
    assert describe_errors([(37, "Number of partitions must be larger than 0."), (44, None)]) == [
        "InvalidPartitionsError (error 37): Number of partitions must be larger than 0.",
        "PolicyViolationError (error 44)",
    ]


def test_a_destination_with_too_few_partitions_cannot_keep_partition_numbers() -> None:
    assert partition_shortfall("orders_REPLICA", 3, "orders", 3) is None
    assert partition_shortfall("orders_REPLICA", 3, "orders", 8) is None
    assert partition_shortfall("orders_REPLICA", 3, "orders", 1) == (
        "destination topic orders has 1 partitions, source orders_REPLICA has 3: "
        "partition numbers cannot be kept"
    )


def test_a_denial_says_which_operation_on_which_resource_of_which_cluster() -> None:
    """What an operator must grant, from the call site's operation and the client's resource."""
    group = denial(
        kerr.GroupAuthorizationFailedError("replicator.dc1"), "dc1", group=("Read", None)
    )
    assert str(group) == "Read on group replicator.dc1 denied by the ACLs of dc1"
    assert isinstance(group, AuthorizationFailed) and group.named
    # Translated on the way (the cause kept): still named; the call site's name wins.
    translated = translate(kerr.TopicAuthorizationFailedError())
    translated.__cause__ = kerr.TopicAuthorizationFailedError("ignored")
    write = denial(translated, "dc2", topic=("Write", "orders"))
    assert str(write) == "Write on topic orders denied by the ACLs of dc2"
    # Named once: a second call site does not rename it; other errors pass through.
    assert denial(write, "dc9", topic=("Read", "x")) is write
    unavailable = denial(kerr.KafkaConnectionError(), "dc1", topic=("Read", "orders"))
    assert not isinstance(unavailable, AuthorizationFailed)
    # A kind the call site did not expect is left as the client said it.
    cluster = denial(kerr.ClusterAuthorizationFailedError(), "dc1", topic=("Write", "orders"))
    assert isinstance(cluster, AuthorizationFailed) and not cluster.named
    assert "ClusterAuthorizationFailedError" in str(cluster)


def test_a_fault_that_is_no_clients_error_says_where_it_was_raised() -> None:
    def position() -> int:
        raise AssertionError  # what aiokafka's bare asserts raise

    try:
        position()
    except AssertionError as exc:
        error = translate(exc)
    assert isinstance(error, KafkaFailure) and not error.retriable
    said = str(error)
    assert said.startswith("AssertionError at ")
    line = position.__code__.co_firstlineno + 1
    assert said.endswith(f"/{Path(__file__).name}:{line} in position")
    assert str(translate(ValueError("odd"))) == "ValueError: odd"
