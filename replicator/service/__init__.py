"""The running service: one process, one root TaskGroup, its HTTP surface.

``app``
    :class:`~replicator.service.app.ReplicatorService`: the root ``asyncio.TaskGroup`` owning
    every task (HTTP, probes, feeds, legs, heartbeats, group sync, dead letters), its start order
    and its shutdown order.
``http``
    ``/livez``, ``/readyz``, ``/status`` and ``/metrics``.
"""
