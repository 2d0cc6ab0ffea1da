"""Views: narrow, frozen parts of the settings, for components that read only a few of them.

Each view holds exactly what its component reads and is built by a method of
:class:`~replicator.config.settings.Settings` (``settings.client_timings()``,
``settings.producer_tuning()``, ``settings.dead_letters()``). Where a function is also called with
the whole settings, it names what it reads as a protocol (:class:`Timings`,
:class:`ProducerSettings`) that both the settings and the view satisfy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from replicator.config.clusters import ClusterSettings
from replicator.config.values import Compression


class Timings(Protocol):
    """What a Kafka client factory reads besides a cluster's block: the settings, or
    :class:`ClientTimings`."""

    @property
    def request_timeout_ms(self) -> int: ...

    @property
    def metadata_max_age_ms(self) -> int: ...

    @property
    def probe_timeout_ms(self) -> int: ...


class ProducerSettings(Timings, Protocol):
    """What a destination producer's factory reads besides a cluster's block: the settings, or
    :class:`ProducerTuning`."""

    @property
    def batch_max_bytes(self) -> int: ...

    @property
    def linger_ms(self) -> int: ...

    @property
    def compression(self) -> Compression: ...


@dataclass(frozen=True, slots=True)
class ClientTimings:
    """How long a Kafka client waits for an answer or a probe, and how often it refreshes its
    metadata (a client discovering topics; others refresh less often)."""

    request_timeout_ms: int
    metadata_max_age_ms: int
    probe_timeout_ms: int


@dataclass(frozen=True, slots=True)
class ProducerTuning(ClientTimings):
    """A destination producer's timings, and how its batches are built."""

    batch_max_bytes: int
    linger_ms: int
    compression: Compression


@dataclass(frozen=True, slots=True)
class DeadLetterSettings:
    """The dead-letter topic on the local cluster, and how records are written there."""

    topic: str
    cluster: ClusterSettings
    replication_factor: int | None  # of the topic when created (None: the cluster's default)
    producer: ProducerTuning
