"""Configuration: what the replicator is told, and what it means.

``settings``
    The only reader of the environment: ``REPLICATOR_*`` variables parsed once, before the event
    loop starts, into a frozen :class:`~replicator.config.settings.Settings`; invalid values raise
    :class:`~replicator.errors.ConfigError` naming the variable.
``topology``
    What the settings mean: clusters, feeds, legs, and which topic is replicated where under which
    name (:class:`~replicator.config.topology.TopicRules`, one function decides). Pure logic.

Every other package reads its configuration from here; this package imports only
:mod:`replicator.errors`.
"""
