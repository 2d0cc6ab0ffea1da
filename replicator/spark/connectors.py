"""Which Kafka connector a bulk job reads with (``--connector``); imports no pyspark, so the
command line offers the choice without the spark extra."""

from __future__ import annotations

from enum import StrEnum


class Connector(StrEnum):
    """``shipped`` (the default): the ``replicator-kafka`` data source of this package (Python
    workers, nothing fetched). ``standard``: Spark's own ``spark-sql-kafka-0-10``, fetched by
    Spark from Maven Central the first time (``spark.jars.packages``), reading in the JVM."""

    STANDARD = "standard"
    SHIPPED = "shipped"
