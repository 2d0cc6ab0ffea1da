"""The replicator's error tree.

Every failure the data path can meet is one of these. Each carries a ``retriable`` flag: callers ask
it instead of matching exception types. aiokafka's exceptions are translated into this tree at one
boundary, :func:`replicator.kafka.translation.translate`. ``retriable`` says whether the same
attempt may succeed later without anyone changing anything::

    ReplicatorError           base of all; retriable: no (subclasses say otherwise)
      ConfigError             invalid configuration, naming the variable (exit 2); no
      ClusterUnavailable      cluster unreachable, timed out, no broker answering; yes
      AuthenticationFailed    credentials refused (SASL, TLS handshake); no
      AuthorizationFailed     authenticated, but an ACL denies the operation (Topic-, Group-,
                              Cluster-, TransactionalIdAuthorizationFailed); no
      TopicError              a topic the replicator needs cannot be used as it is
        TopicMissing          a topic is not in the cluster's metadata (yet); yes: it may
                              appear when metadata propagates
          TopicNotListedYet   one this replicator has just created; yes: expected for a moment,
                              retried without a warning unless it lasts
        TopicRefused          the destination cluster refused to create a topic; per instance:
                              yes only when the broker's error is retriable (NotController...)
        TopicMismatch         the destination topic exists with fewer partitions than the
                              source; no: an operator must change it (the partition is blocked)
      RecordRefused           the destination refused a record or batch for good (too large,
                              invalid, policy); no
      OutcomeUnknown          a batch was sent but whether the destination wrote it is unknown
                              (or it was queued behind such a batch); no: the partition resumes
                              from the destination's tail instead of retrying
        TopicGone             the destination partition does not exist (any more): nothing was
                              written; the topic is prepared again, then the partition resumes
        ProducerStateLost     the destination lost the idempotent producer's state (restored
                              without its data): nothing was written; the partition resumes
        OwnershipUnsure       the member's group lease ran out before the batch went out (its
                              heartbeats unanswered or refused): nothing was written; the
                              partition resumes from the destination while it still owns it
      InstanceFenced          another process joined the source group under this instance's
                              id (REPLICATOR_INSTANCE_ID): this one stops writing; no
      KafkaFailure            any other client error; per instance, the client's own flag
        NoAuthorizer          a cluster keeps no ACLs (no authorizer, or ACL requests not
                              supported): an ACL sync has nothing to read there, or cannot
                              write there; no
      Unanswered              a coalesced request's answer left out a key it was asked (a bug in
                              the batch function); no
      ProvenanceError         a provenance header present but unreadable or repeated (also a
                              ValueError); no: the record is counted as malformed
      StaleSyncPoint          a failover sync point describes a target partition replaced or cut
                              short since; no
      FailoverRefused         a group cannot be moved as asked (active members in the target,
                              nothing to move from); no
      HandBackRefused         a flow's positions cannot be handed back to its MirrorMaker
                              safely (the flow still runs, its offsets topic is missing); no
      PropertiesError         a Java .properties file Java would refuse (also a ValueError); no
      EmbeddedBrokerError     an embedded broker (demo, sandbox, tests) could not be found or did
                              not start; no
        LocalKafkaError       Apache Kafka's jars could not be fetched, or a local Apache Kafka
                              node (tests, benchmarks) did not start; no
      PromtoolError           Prometheus's promtool could not be fetched at its pinned release
                              (the alert rules' tests); no
      ImageError              a container image could not be built or run (make image, the
                              container tests); no
    Stopped                   not an error: a stop came first and the work was abandoned
                              (:func:`replicator.lifecycle.unless_stopped`); never retried, never
                              reported

Every exception class of the product is defined here (a unit test checks it); modules raise
them, never a bare ``RuntimeError`` for a condition an operator or a caller must tell apart.
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
    """The credentials were accepted but an ACL denies the operation: an operator must grant it.
    ``named``: the message says which operation on which resource of which cluster
    (:func:`replicator.kafka.translation.denial`); ``resource``: the kind the broker named."""

    def __init__(self, message: str, *, named: bool = False, resource: str | None = None) -> None:
        super().__init__(message)
        self.named = named
        self.resource = resource  # "topic", "group" or "cluster": what the broker denied


class TopicError(ReplicatorError):
    """A topic the replicator reads or writes cannot be used as it is."""


class TopicMissing(TopicError):
    """A topic is not in the cluster's metadata: not created yet, or not propagated yet."""

    retriable = True


class TopicNotListedYet(TopicMissing):
    """A topic this replicator has just created is not in the cluster's metadata yet: expected
    for a moment after a creation, retried without a warning unless it lasts."""


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


class OutcomeUnknown(ReplicatorError):
    """A batch was sent but whether the destination wrote it is unknown (or a batch queued
    behind one that was): the partition resumes from the destination's tail.

    ``kind`` names the answer for counting (``replicator_send_errors_total{error}``): the
    cluster's error name where the cluster said something, else the class's name."""

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind or type(self).__name__


class TopicGone(OutcomeUnknown):
    """The destination partition does not exist (any more): nothing was written. The topic is
    prepared again and the partition resumes from the destination, which may have lost the
    records it held (a topic deleted, a cluster rebuilt)."""


class ProducerStateLost(OutcomeUnknown):
    """The destination no longer knows the idempotent producer (``UnknownProducerId``,
    ``OutOfOrderSequenceNumber``: a broker restored without its data): nothing was written; the
    producer takes a new id and the partition resumes from the destination."""


class OwnershipUnsure(OutcomeUnknown):
    """The member's group lease ran out before the batch was handed to the network (its
    heartbeats went unanswered or were refused: frozen, cut off from the source, its loop
    blocked): nothing was written. The partition resumes from the destination if the member
    still owns it; if it lost it, the new owner does (:mod:`replicator.kafka.membership`)."""


class InstanceFenced(ReplicatorError):
    """Another process joined the source cluster's group under this instance's id
    (``REPLICATOR_INSTANCE_ID``, or the platform's ``HOSTNAME``): this one never writes again,
    so two processes of one identity are never two writers."""


class KafkaFailure(ReplicatorError):
    """Any other error reported by a Kafka client, with its retriable flag preserved."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class NoAuthorizer(KafkaFailure):
    """``cluster`` keeps no ACLs: no authorizer (SECURITY_DISABLED), or no ACL requests."""

    def __init__(self, cluster: str, message: str) -> None:
        super().__init__(message, retriable=False)
        self.cluster = cluster


class Unanswered(ReplicatorError, LookupError):
    """A round's answer did not mention a key it was asked for (a bug in the batch function)."""


class ProvenanceError(ReplicatorError, ValueError):
    """A provenance header is present but unreadable or repeated."""


class StaleSyncPoint(ReplicatorError):
    """A sync point describes a target partition that was replaced or cut short since."""


class FailoverRefused(ReplicatorError):
    """The group cannot be moved as asked (active members in the target, nothing to move from)."""


class HandBackRefused(ReplicatorError):
    """A flow's positions cannot be handed back to its MirrorMaker safely (the flow still
    runs, or MirrorMaker 2's offsets topic is not there)."""


class PropertiesError(ReplicatorError, ValueError):
    """A properties file that Java would refuse (a malformed ``\\uXXXX`` escape)."""


class EmbeddedBrokerError(ReplicatorError, RuntimeError):
    """The embedded broker could not be found or did not start."""


class LocalKafkaError(EmbeddedBrokerError):
    """Apache Kafka's jars could not be fetched (no Java, no Maven, no Maven Central), or a
    local Apache Kafka node did not start (its log is in the message)."""


class PromtoolError(ReplicatorError, RuntimeError):
    """Prometheus's ``promtool`` could not be fetched at the pinned release (neither Debian's
    package nor a Go build)."""


class ImageError(ReplicatorError, RuntimeError):
    """A container image could not be built or run: no engine, no base image (neither the
    registry's nor a local stand-in), or a build or run the engine refused (its output in the
    message); or the Kubernetes manifests could not be rendered (no kustomize to fetch, or
    kustomize refusing them)."""


class Stopped(Exception):
    """What :func:`replicator.lifecycle.unless_stopped` raises when stop came first (the work was
    cancelled). Not a :class:`ReplicatorError`: no handler of failures may take it for one."""


def first_error(exc: BaseException) -> BaseException:
    """The first failure inside (nested) exception groups, as a task group raises them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
