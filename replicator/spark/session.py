"""The Spark session of a bulk job, and which Kafka connector it reads and writes through.

Local mode by default (``local[2]``), any cluster with ``--master``. Executors run this package's
interpreter (``PYSPARK_PYTHON``), the ``replicator-kafka`` data source is registered, and option
values holding credentials (``kafka.sasl.jaas.config``) are redacted from Spark's UI and logs.

Two connectors (``--connector``): ``shipped`` (the default, measured the faster here), the
``replicator-kafka`` data source of :mod:`replicator.spark.kafka_source` (Python workers, no
download); and ``standard``, Spark's own ``spark-sql-kafka-0-10`` of the running Spark's
version, which Spark fetches from Maven Central itself the first time (``spark.jars.packages``,
cached by Ivy) and which reads in the JVM. Spark's sink writes no record timestamp, so a
backfill always writes through ``replicator-kafka``, whichever connector reads.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass

import pyspark
from pyspark.sql import SparkSession

from replicator.errors import ReplicatorError
from replicator.spark.connectors import Connector
from replicator.spark.kafka_source import FORMAT, KafkaDataSource

_CONNECTOR = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
_REDACT = r"(?i)secret|password|token|access[.]?key|jaas"


def connector_package() -> str:
    """The Maven coordinates of Spark's Kafka connector for the running Spark."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


@dataclass(frozen=True)
class SparkSetup:
    """Where a job runs (``--master``) and which Kafka connector it reads with (``--connector``)."""

    master: str = "local[2]"
    connector: Connector = Connector.SHIPPED


def spark_session(setup: SparkSetup, app_name: str) -> SparkSession:
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connection chatter, at INFO
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(setup.master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.redaction.regex", _REDACT)
        .config("spark.sql.session.timeZone", "UTC")
    )
    if setup.connector is Connector.STANDARD:
        builder = builder.config("spark.jars.packages", connector_package())
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j's, or Spark's launcher exiting: the fetch failed
        if setup.connector is not Connector.STANDARD:
            raise
        raise ReplicatorError(
            f"--connector standard: Spark could not load {connector_package()} (fetched from "
            f"Maven Central the first time, then from Ivy's cache): {str(exc)[-300:]}; "
            "give --connector shipped to read through replicator-kafka"
        ) from exc
    spark.sparkContext.setLogLevel("ERROR")
    # A few shuffle partitions per core (Spark's 200 are tiny tasks on a small machine).
    spark.conf.set("spark.sql.shuffle.partitions", str(4 * spark.sparkContext.defaultParallelism))
    spark.dataSource.register(KafkaDataSource)
    return spark


def kafka_format(spark: SparkSession, connector: Connector) -> str:
    """The format the jobs read with: ``kafka`` (Spark's connector, which must be on the
    classpath) or ``replicator-kafka``."""
    if connector is Connector.SHIPPED:
        return FORMAT
    try:
        # Spark's class loader: jars of spark.jars.packages are not on the JVM's class path
        jvm = spark.sparkContext._jvm
        jvm.org.apache.spark.util.Utils.classForName(_CONNECTOR, False, False)  # type: ignore[union-attr]
    except Exception as exc:  # ClassNotFoundException, via py4j
        raise ReplicatorError(
            f"--connector standard: {_CONNECTOR} is not on Spark's classpath (a session "
            f"started without {connector_package()}); give --connector shipped"
        ) from exc
    return "kafka"
