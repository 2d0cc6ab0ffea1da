"""The Kafka boundary: every client, request and aiokafka behaviour the product relies on.

Protocol structs (``aiokafka.protocol``) are built in this package only: other packages call its
functions with product-level arguments.

``clients``
    Client factories from a cluster's settings (security, credentials and timeouts in one place),
    cluster probes, what is learnt once per cluster (whether it grants idempotent producers),
    group offsets.
``translation``
    Every aiokafka error, and every broker error code, in the product's terms
    (:mod:`replicator.errors`).
``retry``
    The one retry policy: :func:`~replicator.kafka.retry.retrying` and its backoff.
``producer``
    The destination producer: idempotent, or fenced per partition, so an unknown outcome is never
    retried blindly.
``decoding``
    How fetched records reach the data path: unwrapped, and stopped at a record aiokafka cannot
    decode.
``fetch_sessions``
    Incremental fetch sessions (KIP-227) under the source consumers' fetchers: a fetch names only
    the partitions that changed, costs what changed (told by the planner), and a session error
    falls back to a full fetch.
``fetch_planner``
    What a source consumer's fetcher does at each wake of its loop, decided from what changed
    (pauses, resumes, resets, records buffered, leaders moved), not by walking every assigned
    partition; paused partitions wait on one future; each request handed to its session with
    what changed since the last.
``membership``
    A feed's group membership as a lease: a replica writes a partition only while heartbeats it
    sent were accepted within the lease, and reads a partition new to it only once any previous
    owner's lease has run out (no two writers without transactions); its static identity
    (KIP-345) so that a restarted replica gets its partitions back at once.
``fetching``
    What a fetch loop needs of its source consumer, in product terms (the
    :class:`~replicator.kafka.fetching.FetchSource` Protocol: fetch, seek, pause, resume, where
    a fetch left off, undecodable records, log bounds), what the shared feed needs of its group
    consumer besides (:class:`~replicator.kafka.fetching.GroupSource`: a pattern subscription
    with assignment and revocation callbacks, topic listings, log ends seen), and their aiokafka
    implementations.
``roles``
    The clients the layers above hold, as Protocols of the roles they play (a
    :class:`~replicator.kafka.roles.LogReader`, a :class:`~replicator.kafka.roles.RecordProducer`,
    the destination's :class:`~replicator.kafka.roles.BatchProducer`): only this package makes
    them and names aiokafka's client classes.
``testing``
    In-memory stand-ins for the boundary's seams, shipped for tests: a
    :class:`~replicator.kafka.testing.MemorySource` (source logs read as a consumer reads them,
    with scripted undecodable records and failures) and a
    :class:`~replicator.kafka.testing.MemoryGroupSource` (the same, as a group member a test
    rebalances).
``admin``
    The topic requests made of a cluster in product terms: metadata, CreateTopics (in requests
    the controller takes), CreatePartitions, DescribeConfigs (typed
    :class:`~replicator.kafka.admin.ConfigEntry`) and the hand-built IncrementalAlterConfigs.
``mm2_wire``
    MirrorMaker 2's heartbeat and checkpoint records, encoded in Kafka's protocol types as
    MirrorMaker 2 encodes them.
``coalesce``
    Many concurrent questions, one per partition, asked in one request.
``readers``
    Reading topics back exactly, with provenance (verification, demo, tests; not the data path).
``internals``
    aiokafka's private surface, all of it: every underscore attribute read or written, every
    class patched or subclassed, behind named functions, with the ``CONTRACT`` a unit test checks
    against the installed aiokafka. No other module of the product touches aiokafka's internals.
"""
