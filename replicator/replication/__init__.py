"""The data path: source records to every destination, in order, exactly once, with provenance.

``feed``
    A source feed: one fetch of a source cluster, fanned out to the legs of its feed plan.
``fanout``
    One source partition's fetched chunks built into batches for every attached leg at once.
``fetch_round``
    One fetch round, shared by the feed and the catch-up fetch: what a fetch brought (records,
    positions outside the log or moved past markers, undecodable records) handed to its loop.
``leg``
    One direction of replication, from one feed into one destination cluster: owns the
    destination's producer, topics, partitions and senders (:class:`~replicator.replication.leg.
    LegRunner`).
``connections``
    What a leg needs of its two clusters (the :class:`~replicator.replication.connections.
    LegConnections` Protocol: its source consumer, destination, topic admins, predecessor).
``kafka_connections``
    A leg's connections on aiokafka, built from the service's cluster clients.
``testing``
    A leg's connections in memory (source logs and group offsets), for the leg's unit tests.
``start_positions``
    Where a leg's newly assigned partitions start: committed offsets, ``START_FROM``, or where
    the MirrorMaker a flow replaces stood.
``upkeep``
    A leg's periodic tasks: health refresh, destination marks of idle partitions, config sync.
``partition``
    One source partition on one leg, its single owner of state: mode, queue, acknowledgements,
    with named transitions (:class:`~replicator.replication.partition.LegPartition`).
``states``
    A partition's modes (who feeds it), why it halted, how a chunk fits it, its queue entries.
``in_flight``
    What one partition has handed to its destination and not yet had answered (ranges, batches,
    destination log ends), owned by the partition.
``sender``
    The ordered sender: one partition's queue to its destination, with epochs, fencing, and a
    resume from the destination after an unknown outcome or a denied write.
``sending``
    What every sender of a leg shares, made once per leg, and the source log seam it reads.
``outcomes``
    A destination's answers other than an acknowledgement: restart, wait out a denial, halt.
``preparing``
    Before the first batch (and a replay's): the destination topic made ready and where the
    partition resumes, read as a value, then applied to the partition.
``replay``
    A destination partition that lost what the leg delivered, replayed from the source.
``oversize``
    ``REPLICATOR_RECORD_TOO_LARGE_POLICY``: halt, or park the record in the dead-letter topic.
``destination``
    What a sender needs from its destination (the :class:`~replicator.replication.destination.
    Destination` Protocol: send a batch and learn its outcome, read a tail, prepare a topic) and
    its aiokafka implementation; the unit tests drive the sender through an in-memory one.
``resume``
    Where a partition resumes: the destination's tail and saved marks, read for many partitions
    per fetch, so nothing is written twice after a restart.
``takeover``
    Where a flow's partitions start when the MirrorMaker it replaces stopped (MirrorMaker 1's
    group offsets, MirrorMaker 2's Connect offsets), confirmed by what the target holds.
``committer``
    Committing upstream offsets that every destination acknowledgement covers.
``catch_up``
    A leg's own reads of the source for partitions the shared feed cannot serve, through the
    :class:`~replicator.kafka.fetching.FetchSource` seam (the unit tests through an in-memory
    one, :class:`~replicator.kafka.testing.MemorySource`).
``offset_reset``
    What a position outside the source log becomes; never silent.
``dead_letters``
    Records a destination cannot take, parked on the local cluster.
``accounting``
    What a leg counts beyond the records it copies: duplicates it could not prevent, records
    the loop rule kept back, derived records.
``health``
    What a leg tells operators: readiness, ``/status``, gauges, transitions worth a log line.
``heartbeats``
    Each flow proving its whole path on an interval (and MirrorMaker 2's heartbeat records).
"""
