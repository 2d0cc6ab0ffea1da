"""An unreachable destination stalls only its own leg, and catches up when it returns."""

from __future__ import annotations

from tests.integration.harness import (
    Start,
    count,
    create_topics,
    new_cluster,
    produce,
    replicator_env,
    start_clusters,
    wait_until,
)


def test_remote_down_local_delivery_continues_and_remote_catches_up(replicators: Start) -> None:
    with start_clusters("dc1") as brokers:
        # dc2's broker is not running yet: its address refuses connections.
        dc2 = new_cluster("dc2")
        env = replicator_env("dc1", {**brokers, "dc2": dc2})
        create_topics(brokers["dc1"], orders_REPLICA=3)
        dc1 = replicators("dc1", env)
        dc1.wait_serving()
        produce(brokers["dc1"], "orders_REPLICA", 200, partitions=3)
        wait_until(lambda: count(brokers["dc1"], "orders") == 200, 30, "local delivery", dc1.log)

        def remote_reported_down() -> bool:
            status, body = dc1.get("/readyz")
            return status == 503 and any("dc2" in p for p in body["problems"])

        wait_until(remote_reported_down, 20, "/readyz reporting dc2", dc1.log)
        status, live = dc1.get("/livez")
        assert status == 200, live

        try:
            dc2.start()
            wait_until(lambda: count(dc2, "orders") == 200, 60, "dc2 catching up", dc1.log)
            dc1.wait_ready(timeout=30)
            assert count(brokers["dc1"], "orders") == 200
            assert dc1.stop() == 0
        finally:
            dc2.stop()
