"""Failover: a consumer group's exact positions in another cluster, from provenance.

``positions``
    The translation of one position between clusters, through the provenance of the records
    around it (:class:`~replicator.failover.positions.PartitionLog` is its seam,
    ``MemoryLog`` in ``tests/unit/failover/test_positions.py`` the in-memory fake its tests use).
``group_positions``
    A whole group's positions translated (every partition it has a position in).
``checkpoints``
    The checkpoint records and topic: the latest translated position of each synced group (and
    MirrorMaker 2's ``Checkpoint`` format).
``group_sync``
    Continuous checkpoints and the offset sync of groups with no active member in the target.
``plan``
    ``replicator failover``: the command's plan and its execution for one group.
``recovery_point``
    ``replicator rpo``: what a cluster holds of another's ``_REPLICA`` topics (the newest record
    of each origin partition, its age) and, when that one answers, what it does not hold yet
    (:class:`~replicator.failover.recovery_point.ReadBack` is its seam).
"""
