"""The Spark session of a bulk job, and which Kafka format it reads and writes.

Local mode by default (``local[2]``), any cluster with ``--master``. Executors run this package's
interpreter (``PYSPARK_PYTHON``), the ``replicator-kafka`` data source is registered, and option
values holding credentials (``kafka.sasl.jaas.config``) are redacted from Spark's UI and logs.
"""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession

from replicator.spark.kafka_source import FORMAT, KafkaDataSource

_CONNECTOR = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
_REDACT = r"(?i)secret|password|token|access[.]?key|jaas"


def spark_session(master: str, app_name: str) -> SparkSession:
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connection chatter, at INFO
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.redaction.regex", _REDACT)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # A few shuffle partitions per core (Spark's 200 are tiny tasks on a small machine).
    spark.conf.set("spark.sql.shuffle.partitions", str(4 * spark.sparkContext.defaultParallelism))
    spark.dataSource.register(KafkaDataSource)
    return spark


def kafka_format(spark: SparkSession) -> str:
    """``kafka`` when the standard connector is on the classpath, else ``replicator-kafka``."""
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(_CONNECTOR)  # type: ignore[union-attr]
    except Exception:  # ClassNotFoundException, via py4j: that absence is the answer sought
        return FORMAT
    return "kafka"
