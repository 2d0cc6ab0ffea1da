"""The dead-letter topic: records a destination cannot take, parked on the local cluster.

With ``REPLICATOR_RECORD_TOO_LARGE_POLICY=dead-letter``, a record larger than a destination
topic accepts is written here instead (``REPLICATOR_DEAD_LETTER_TOPIC`` on the local cluster,
where the record already fits, since it was published there), and replication of its partition
goes on. A parked record keeps its key, value, timestamp and headers, provenance included, and
gains two headers: the destination it could not reach and why. Its source offset is committed
only once the dead-letter topic acknowledged it, so nothing is dropped on the way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import structlog

from replicator.config.views import DeadLetterSettings
from replicator.kafka.admin import TopicSpec, describe_partitions, replication_factor
from replicator.kafka.clients import ClusterClient
from replicator.kafka.producer import start_producer
from replicator.kafka.roles import RecordProducer
from replicator.lifecycle import close_quietly
from replicator.topics.provisioning import create_topic

log = structlog.get_logger(__name__)

DEAD_LETTER_DESTINATION = "replicator-dead-letter-destination"
DEAD_LETTER_REASON = "replicator-dead-letter-reason"

# Parked records were accepted by the local cluster once: let its broker, not the client, decide.
_MAX_REQUEST_BYTES = 64 * 1024 * 1024


class DeadLetters:
    """Writes parked records to the local cluster's dead-letter topic (created if missing)."""

    def __init__(self, settings: DeadLetterSettings, local: ClusterClient) -> None:
        self.topic = settings.topic
        self._settings = settings
        self._local = local
        self._producer: RecordProducer | None = None
        self._lock = asyncio.Lock()

    async def park(self, records: Sequence[Any], destination: str, reason: str) -> None:
        """Write ``records`` (as built for ``destination``) and wait for the acknowledgement."""
        producer = await self._started()
        extra = [
            (DEAD_LETTER_DESTINATION, destination.encode()),
            (DEAD_LETTER_REASON, reason.encode()),
        ]
        sent = [
            await producer.send(
                self.topic,
                key=record.key,
                value=record.value,
                timestamp_ms=record.timestamp,
                headers=[*record.headers, *extra],
            )
            for record in records
        ]
        await asyncio.gather(*sent)

    async def _started(self) -> RecordProducer:
        async with self._lock:
            if self._producer is None:
                await self._ensure_topic()

                # Idempotent until the local cluster refuses a producer id (learnt once).
                self._producer = await start_producer(
                    self._local,
                    self._settings.producer,
                    "replicator-dead-letters",
                    max_request_size=_MAX_REQUEST_BYTES,
                )
            return self._producer

    async def _ensure_topic(self) -> None:
        admin = await self._local.admin()
        if self.topic in await describe_partitions(admin):
            return
        replication = await replication_factor(admin, self._settings.replication_factor)
        errors = await create_topic(admin, TopicSpec(self.topic, 1, replication))
        if errors:  # parks then fail with the broker's reason: retried, shown in /status
            log.warning("dead-letter topic not created", topic=self.topic, errors=errors)
        else:
            log.info("dead-letter topic created", topic=self.topic)

    async def close(self, timeout: float) -> None:
        """Flush and close within ``timeout`` (what is left of the stop's grace)."""
        if self._producer is not None:
            await close_quietly(self._producer.stop(), timeout)
