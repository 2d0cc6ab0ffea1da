"""Progress of a Spark job on the terminal (stderr): tasks done of the running stages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def spark_progress(spark: SparkSession, what: str) -> Iterator[None]:
    """Show ``what`` with the completed and total tasks of Spark's active stages until done."""
    tracker = spark.sparkContext.statusTracker()
    done = threading.Event()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = progress.add_task(what, total=None)

    def poll() -> None:
        while not done.wait(0.3):
            infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            stages = [s for s in infos if s is not None]
            if stages:
                total = sum(int(s.numTasks) for s in stages)
                completed = sum(int(s.numCompletedTasks) for s in stages)
                progress.update(task, total=total, completed=completed)

    watcher = threading.Thread(target=poll, daemon=True)
    with progress:
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()
