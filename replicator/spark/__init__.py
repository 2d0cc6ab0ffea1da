"""Bulk jobs on Spark (backfill, audit) and their Kafka access; needs the ``spark`` extra."""
