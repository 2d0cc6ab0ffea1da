"""aiokafka's errors in the product's terms: the one place :mod:`replicator.errors` is reached from
a client's exception (:func:`translate`), a broker's error code (:func:`broker_error`,
:func:`error_name`) or a task group's (:func:`said`), so callers only ask ``retriable``."""

from __future__ import annotations

import ssl

import aiokafka.errors as kerr

from replicator.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    ClusterUnavailable,
    KafkaFailure,
    RecordRefused,
    ReplicatorError,
    first_error,
)

_REFUSED = (
    kerr.MessageSizeTooLargeError,
    kerr.RecordListTooLargeError,
    kerr.RecordTooLargeError,
    kerr.InvalidTopicError,
    kerr.CorruptRecordException,
    kerr.InvalidTimestampError,
    kerr.UnsupportedForMessageFormatError,
    kerr.PolicyViolationError,
)
_AUTH = (
    kerr.AuthenticationFailedError,
    kerr.AuthenticationMethodNotSupported,
    kerr.SaslAuthenticationFailed,
    kerr.UnsupportedSaslMechanismError,
    kerr.IllegalSaslStateError,
)
# Authenticated, but an ACL denies the operation: a different fix (grant it) than a bad password.
_AUTHORIZATION = (
    kerr.TopicAuthorizationFailedError,
    kerr.GroupAuthorizationFailedError,
    kerr.ClusterAuthorizationFailedError,
    kerr.TransactionalIdAuthorizationFailed,
    kerr.DelegationTokenAuthorizationFailed,
)
_UNAVAILABLE = (
    kerr.KafkaConnectionError,
    kerr.NodeNotReadyError,
    kerr.NoBrokersAvailable,
    kerr.KafkaTimeoutError,
    kerr.RequestTimedOutError,
    kerr.KafkaUnavailableError,
    kerr.BrokerNotAvailableError,
)


# aiokafka's SCRAM client fails with a bare KeyError/ValueError when the broker answers the
# exchange with an error (unknown user, wrong password) instead of its signature.
_SCRAM_STEPS = frozenset({"process_server_first_message", "process_server_final_message"})


def _in_scram_exchange(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name in _SCRAM_STEPS:
            return True
        tb = tb.tb_next
    return False


def translate(exc: BaseException) -> ReplicatorError:
    """The replicator's view of an exception raised by aiokafka (or the network under it)."""
    if isinstance(exc, ReplicatorError):
        return exc
    name = type(exc).__name__
    if _in_scram_exchange(exc):
        return AuthenticationFailed(
            "authentication refused (SCRAM exchange): check the username, password and SASL "
            "mechanism"
        )
    if isinstance(exc, _AUTH):
        return AuthenticationFailed(
            f"authentication refused ({name}): check the username, password and SASL mechanism"
        )
    if isinstance(exc, _AUTHORIZATION):
        kind = {
            kerr.TopicAuthorizationFailedError: "topic",
            kerr.GroupAuthorizationFailedError: "group",
            kerr.ClusterAuthorizationFailedError: "cluster",
        }.get(type(exc))
        return AuthorizationFailed(f"{name}: operation denied by the cluster's ACLs", resource=kind)
    if isinstance(exc, ssl.SSLCertVerificationError):
        # "unable to get local issuer certificate", "IP address mismatch, certificate is not
        # valid for 'localhost'.": the certificate the broker showed was not accepted.
        why = exc.verify_message or exc.reason or name
        return AuthenticationFailed(f"TLS handshake failed: broker certificate refused: {why}")
    if isinstance(exc, ssl.SSLError):
        # ``reason`` is set only on errors raised by OpenSSL, not on those raised in Python.
        return AuthenticationFailed(f"TLS handshake failed: {getattr(exc, 'reason', None) or name}")
    if isinstance(exc, _REFUSED):
        return RecordRefused(name)
    if isinstance(exc, (*_UNAVAILABLE, OSError, TimeoutError)):
        return ClusterUnavailable(name)
    if isinstance(exc, kerr.KafkaError):
        return KafkaFailure(name, retriable=bool(getattr(exc, "retriable", False)))
    return KafkaFailure(fault(exc), retriable=False)


def fault(exc: BaseException) -> str:
    """A fault that is no client's or network's error (a bug here or in a library: a bare
    ``AssertionError`` says nothing alone) said with where it was raised:
    ``AssertionError at aiokafka/consumer/subscription_state.py:492 in position``."""
    name = type(exc).__name__
    text = f"{name}: {exc}" if str(exc) else name
    tb = exc.__traceback__
    if tb is None:
        return text
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    parts = code.co_filename.replace("\\", "/").split("/")
    # From the package down: site-packages and checkout paths say nothing of the fault.
    for root in ("aiokafka", "replicator", "kafka"):
        if root in parts:
            parts = parts[len(parts) - parts[::-1].index(root) - 1 :]
            break
    else:
        parts = parts[-2:]
    return f"{text} at {'/'.join(parts)}:{tb.tb_lineno} in {code.co_name}"


def denial(
    exc: BaseException,
    cluster: str,
    *,
    topic: tuple[str, str | None] | None = None,
    group: tuple[str, str | None] | None = None,
) -> ReplicatorError:
    """``exc`` translated; an ACL denial said as what it refused, for the operator to grant:
    ``Write on topic orders denied by the ACLs of dc2``. ``topic`` and ``group`` give, for a
    denial of that resource type, the operations the request needed and the resource's name
    (used when the client's error does not name it)."""
    error = translate(exc)
    if not isinstance(error, AuthorizationFailed) or error.named:
        return error
    if error.resource == "group" and group is not None:
        kind, (operations, name) = "group", group
    elif error.resource == "topic" and topic is not None:
        kind, (operations, name) = "topic", topic
    else:
        return error
    while isinstance(exc, ReplicatorError) and exc.__cause__ is not None:
        exc = exc.__cause__  # translated on the way: the client's error names the resource
    if name is None and isinstance(exc, _AUTHORIZATION) and exc.args and exc.args[0]:
        named = exc.args[0]  # aiokafka's: the group id, a topic or a set of them
        name = ", ".join(sorted(named)) if isinstance(named, (set, frozenset, list)) else str(named)
    return denied(operations, f"{kind} {name}" if name else kind, cluster)


def denied(operations: str, resource: str, cluster: str) -> AuthorizationFailed:
    """The one way a denial is said: ``Create on topic orders denied by the ACLs of dc2``."""
    return AuthorizationFailed(
        f"{operations} on {resource} denied by the ACLs of {cluster}", named=True
    )


def said(exc: BaseException) -> str:
    """A failure in one line, as the error tree names it (the first one inside task groups)."""
    first = first_error(exc)
    if not isinstance(first, Exception):
        return str(first) or type(first).__name__
    return str(translate(first)) or type(first).__name__


def broker_error(code: int) -> ReplicatorError:
    """The replicator's view of an error code in a broker's answer (per topic, in CreateTopics)."""
    return translate(kerr.for_code(code)())


def error_name(code: int) -> str:
    """Kafka's name for a broker error code (``TopicAuthorizationFailedError`` for 29)."""
    name: str = kerr.for_code(code).__name__
    return name
