"""The replicator's error tree.

Every failure the data path can meet is one of these. Each carries a ``retriable`` flag: callers ask
it instead of matching exception types. aiokafka's exceptions are translated into this tree at one
boundary, :func:`replicator.kafka.translate`.
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


class TopicMismatch(ReplicatorError):
    """A destination topic exists but cannot hold the source partitions (too few partitions)."""


class RecordRefused(ReplicatorError):
    """The destination refused a record or batch for good (too large, invalid, unauthorised)."""


class KafkaFailure(ReplicatorError):
    """Any other error reported by a Kafka client, with its retriable flag preserved."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable
