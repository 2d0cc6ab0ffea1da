"""The replicator's error tree.

Every failure the data path can meet is one of these. Each carries a ``retriable`` flag: callers ask
it instead of matching exception types. aiokafka's exceptions are translated into this tree at one
boundary, :func:`replicator.kafka.translate`. ``retriable`` says whether the same attempt may
succeed later without anyone changing anything::

    ReplicatorError           base of all; retriable: no (subclasses say otherwise)
      ConfigError             invalid configuration, naming the variable (exit 2); no
      ClusterUnavailable      cluster unreachable, timed out, no broker answering; yes
      AuthenticationFailed    credentials refused (SASL, TLS handshake); no
      AuthorizationFailed     authenticated, but an ACL denies the operation (Topic-, Group-,
                              Cluster-, TransactionalIdAuthorizationFailed); no
      TopicError              a topic the replicator needs cannot be used as it is
        TopicMissing          a topic is not in the cluster's metadata (yet); yes: it may
                              appear when metadata propagates
        TopicRefused          the destination cluster refused to create a topic; per instance:
                              yes only when the broker's error is retriable (NotController...)
        TopicMismatch         the destination topic exists with fewer partitions than the
                              source; no: an operator must change it (the partition is blocked)
      RecordRefused           the destination refused a record or batch for good (too large,
                              invalid, policy); no
      KafkaFailure            any other client error; per instance, the client's own flag
"""

from __future__ import annotations


class ReplicatorError(Exception):
    """Base of every error the replicator raises on purpose."""

    retriable: bool = False


class ConfigError(ReplicatorError):
    """Invalid configuration; ``variable`` names the environment variable at fault."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable
        self.message = message


class ClusterUnavailable(ReplicatorError):
    """A cluster could not be reached or did not answer in time."""

    retriable = True


class AuthenticationFailed(ReplicatorError):
    """The cluster refused the credentials: retrying with the same ones cannot help."""


class AuthorizationFailed(ReplicatorError):
    """The credentials were accepted but an ACL denies the operation: an operator must grant it."""


class TopicError(ReplicatorError):
    """A topic the replicator reads or writes cannot be used as it is."""


class TopicMissing(TopicError):
    """A topic is not in the cluster's metadata: not created yet, or not propagated yet."""

    retriable = True


class TopicRefused(TopicError):
    """The destination cluster refused to create a topic (invalid settings, policy, ...).

    Not retriable unless the broker said its error was (the controller moved, say).
    """

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class TopicMismatch(TopicError):
    """A destination topic exists but cannot hold the source partitions (too few partitions)."""


class RecordRefused(ReplicatorError):
    """The destination refused a record or batch for good (too large, invalid, policy)."""


class KafkaFailure(ReplicatorError):
    """Any other error reported by a Kafka client, with its retriable flag preserved."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


def first_error(exc: BaseException) -> BaseException:
    """The first failure inside (nested) exception groups, as a task group raises them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
