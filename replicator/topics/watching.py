"""A feed's source topics as its rules see them, kept current and visible.

Each feed lists its source cluster's topics at start-up and then every
``REPLICATOR_METADATA_MAX_AGE_MS``, and hands each listing to :class:`TopicWatch`. The watch asks
the rules (:meth:`TopicRules.select`) which topics are replicated and why the others are not,
and owns what follows from the answer: the consumer subscription (exactly the replicated topics),
the ``replicator_source_topics`` gauges, ``/status``, and the log: one line whenever the answer
changes, a warning when the rules match no replica topic at all (naming the rules and what they
rejected), never a line per listing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import structlog

from replicator.config.topology import Rejection, TopicRules, TopicSelection
from replicator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)

_SHOWN = 50  # topics listed per reason in /status and the log; the rest are counted


class TopicWatch:
    """The latest topic selection of the local cluster, and its named transitions."""

    def __init__(
        self, rules: TopicRules, metrics: Metrics, cluster: str, feed: str = "replica"
    ) -> None:
        self._rules = rules
        self._metrics = metrics
        self._feed = feed
        self._log = log.bind(cluster=cluster, feed=feed)
        self.selection: TopicSelection | None = None
        self.listed_at: float | None = None
        self.last_error: str | None = None

    @property
    def subscription_pattern(self) -> str:
        """The consumer subscription: exactly the topics of the latest selection."""
        selection = self.selection or TopicSelection(())
        return selection.subscription_pattern

    def listed(self, topics: Iterable[str]) -> bool:
        """A new listing of the cluster's topics; ``True`` when the replicated set changed."""
        selection = self._rules.select(topics)
        previous, self.selection = self.selection, selection
        self.listed_at, self.last_error = time.time(), None
        self._export(selection)
        if previous is not None and previous == selection:
            return False
        self._report(selection)
        return previous is None or previous.replicated != selection.replicated

    def listing_failed(self, error: str) -> None:
        """The cluster could not be listed: the previous selection stays in force."""
        if self.last_error is None:
            self._log.warning("cannot list the cluster's topics", error=error)
        self.last_error = error

    def _export(self, selection: TopicSelection) -> None:
        counts = {"replicated": len(selection.replicated)}
        counts.update({reason.value: 0 for reason in Rejection})
        for reason in selection.rejected.values():
            counts[reason.value] += 1
        for name, count in counts.items():
            self._metrics.source_topics.labels(self._feed, name).set(count)

    def _report(self, selection: TopicSelection) -> None:
        rejected = {
            reason: _capped(topics)
            for reason, topics in selection.by_reason().items()
            if reason != Rejection.NOT_A_REPLICA_TOPIC
        }
        if selection.replicated:
            self._log.info(
                "topic selection",
                replicated=_capped(list(selection.replicated)),
                rejected=rejected,
            )
            return
        suffix = self._rules.suffix
        if suffix is None:
            self._log.warning(
                "the flow's topic rules match no topic: nothing is copied",
                **self._rules.describe(),
                rejected=rejected,
                hint="the include and exclude rules are matched against the whole source topic "
                "name",
            )
            return
        self._log.warning(
            "the topic rules match no replica topic: nothing is replicated",
            **self._rules.describe(),
            rejected=rejected,
            hint=f"applications publish to <topic>{suffix}; the include and exclude "
            "rules are matched against <topic>, the whole name",
        )

    def status(self) -> dict[str, Any]:
        selection = self.selection
        return {
            "rules": self._rules.describe(),
            "listed_seconds_ago": None
            if self.listed_at is None
            else round(time.time() - self.listed_at, 1),
            "last_error": self.last_error,
            "replicated": None if selection is None else list(selection.replicated),
            "rejected": None
            if selection is None
            else {reason: _capped(topics) for reason, topics in selection.by_reason().items()},
        }


def _capped(topics: list[str]) -> list[str]:
    if len(topics) <= _SHOWN:
        return topics
    return [*topics[:_SHOWN], f"... and {len(topics) - _SHOWN} more"]
