"""Topics: which exist, which are replicated, and what each destination topic must be.

``provisioning``
    Destination topics made ready before the first record: created with the source's partition
    count, replication factor and configuration, grown when the source grows, configs kept in sync
    (:class:`~replicator.topics.provisioning.TopicProvisioner`, batched behind
    :class:`~replicator.topics.provisioning.ClusterAdmin`, over :mod:`replicator.kafka.admin`).
``configs``
    Which configs a destination topic is created with and which changes make it follow its
    source (raise-only or mirror). Pure logic, no I/O.
``watching``
    A feed's source topics as its rules see them, kept current: the subscription, the topics
    added, and the rules that match nothing (:class:`~replicator.topics.watching.TopicWatch`).
``snapshot``
    The exact ``[start, end)`` offset range of every partition of some topics, for the bulk jobs
    and the operator commands.
``acl_sync``
    Which topic ACLs of a source a sync copies to its target, renamed, downgraded or left out
    (MirrorMaker 2's rules, or ``movable``: the same everywhere), each decision with its
    reason, and a sync's round against a ledger of what it created. Pure logic, no I/O.
``acl_ledger``
    Each cluster's ACLs and the ledger of what the syncs created there (its checkpoints topic),
    on Kafka, errors naming the grant they lack.
``acl_syncs``
    The service's ACL syncs, one per leg into another cluster whose feed has a policy, run every
    interval by one task; what ``/status`` and the metrics show of them.
"""
