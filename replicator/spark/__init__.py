"""Bulk jobs on Spark (backfill, audit) and their Kafka access; needs the ``spark`` extra.

``commands``
    ``replicator backfill`` and ``replicator audit``: settings in, report out, exit status.
``backfill``
    Copy a bounded history of replica topics to other clusters, then hand over to the sidecar.
``audit``
    Proof that every cluster holds what every replica topic (or flow source) was given.
``frames``
    DataFrames of Kafka snapshots; provenance as Spark columns (the jobs' shared vocabulary).
``kafka_source``
    The ``replicator-kafka`` batch data source, where Spark's Kafka connector is not installed.
``session``
    The job's Spark session and which Kafka format it reads and writes.
``connectors``
    Which Kafka connector a job reads with (no pyspark: the command line's choice).
``progress``
    Tasks done of the running stages, on the terminal.
``stage_times``
    Where a job's time went, from Spark's records of its stages.
``jobs_demo``
    ``replicator demo --spark``: both jobs on two embedded brokers, end to end.

Nothing outside this package (and the CLI's job commands) imports pyspark.
"""
