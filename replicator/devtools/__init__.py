"""Development and trial tools: nothing here runs in ``replicator run``.

``embedded``
    Embedded Kafka-protocol brokers on loopback (the ``embedded`` extra), for the demo, the
    sandbox and the test suite.
``jvm``
    Java tools from Maven Central's jars: copied once into a cache, run as JVMs that die with
    the process that started them.
``apache_kafka``
    Apache Kafka itself from Maven Central's jars, as local JVMs (KRaft, one or three nodes,
    TLS, SCRAM and ACLs on request), for the test suite, the benchmarks and
    ``replicator sandbox --broker kafka``; Kafka's own command-line tools.
``mirror_makers``
    MirrorMaker 2 (dedicated mode) and MirrorMaker 1 themselves, as local JVMs from Maven
    Central's jars: the peers the tests and the benchmarks compare the replicator with.
``promtool``
    Prometheus's ``promtool`` at a pinned release, fetched once, for the test suite's checks
    of the alerting rules.
``images``
    The product's container images built as shipped (``make image``, the container tests):
    the engine, the base images or their local stand-ins, the facts about each image.
``manifests``
    The Kubernetes overlays rendered by kustomize at a pinned release (built once with Go),
    split into what ``podman kube play`` runs and what only the API's schemas check.
``wan``
    A relay adding a fixed latency to every connection across a simulated wide-area link,
    for the benchmarks across datacenters.
``demo``
    ``replicator demo``: two local datacenters, two replicators, live traffic, every record
    counted.
``sandbox``
    ``replicator sandbox``: local brokers (embedded, or Apache Kafka) and the ``export`` lines to
    try the replicator by hand.
"""
