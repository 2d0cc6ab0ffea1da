"""Where a Spark job's time went, from Spark's own records of its stages."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class StageTime:
    stage: int
    tasks: int
    input_records: int  # records its tasks read from a data source
    began: float  # epoch seconds
    ended: float

    @property
    def seconds(self) -> float:
        return self.ended - self.began


def stage_times(spark: SparkSession, group: str) -> list[StageTime]:
    """The completed stages of the jobs run under job group ``group`` (``setJobGroup``)."""
    context = spark.sparkContext
    tracker = context.statusTracker()
    wanted = set()
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is not None:
            wanted.update(info.stageIds)
    jvm, gateway = context._jvm, context._gateway
    assert jvm is not None and gateway is not None
    stages = (
        context._jsc.sc()
        .statusStore()
        .stageList(
            jvm.java.util.ArrayList(),  # every status
            False,
            False,
            gateway.new_array(jvm.double, 0),
            jvm.java.util.ArrayList(),
        )
    )
    found = []
    each = stages.iterator()
    while each.hasNext():
        stage = each.next()
        began, ended = stage.submissionTime(), stage.completionTime()
        if stage.stageId() in wanted and began.isDefined() and ended.isDefined():
            start, end = began.get().getTime() / 1000, ended.get().getTime() / 1000
            found.append(
                StageTime(stage.stageId(), stage.numTasks(), stage.inputRecords(), start, end)
            )
    return sorted(found, key=lambda s: s.stage)


def reading_seconds(stages: list[StageTime]) -> float:
    """From the first stage that read a data source starting to the last one ending."""
    reading = [s for s in stages if s.input_records > 0]
    if not reading:
        return 0.0
    return max(s.ended for s in reading) - min(s.began for s in reading)
