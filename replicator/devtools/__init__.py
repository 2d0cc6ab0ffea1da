"""Development and trial tools: nothing here runs in ``replicator run``.

``embedded``
    Embedded Kafka-protocol brokers on loopback (the ``embedded`` extra), for the demo, the
    sandbox and the test suite.
``demo``
    ``replicator demo``: two local datacenters, two replicators, live traffic, every record
    counted.
``sandbox``
    ``replicator sandbox``: local brokers and the ``export`` lines to try the replicator by hand.
"""
