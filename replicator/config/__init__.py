"""Configuration: what the replicator is told, and what it means.

``values``
    What one setting may hold: the environment's names (``REPLICATOR_*``), the closed lists of
    words (enums), the checked types (regexes, readable files), and how a message may show a
    value (never a secret).
``clusters``
    One cluster's connection block (:class:`~replicator.config.clusters.ClusterSettings`, with
    its own credentials) and one MirrorMaker-style flow
    (:class:`~replicator.config.clusters.FlowSettings`).
``settings``
    The whole configuration as one frozen model (:class:`~replicator.config.settings.Settings`),
    the rules that need more than one value, and the methods building its views. It reads
    nothing itself.
``views``
    Narrow frozen views of the settings for components that read a few of them
    (:class:`~replicator.config.views.ClientTimings`,
    :class:`~replicator.config.views.DeadLetterSettings`), and the protocols of what the Kafka
    client factories read.
``loading``
    The only reader of the environment: ``REPLICATOR_*`` variables parsed once, before the event
    loop starts (:func:`~replicator.config.loading.load_settings`); typos refused with a hint,
    Kubernetes service links ignored, every invalid value a
    :class:`~replicator.errors.ConfigError` naming the variable (exit status 2).
``topology``
    What the settings mean: clusters, feeds, legs, and which topic is replicated where under which
    name (:class:`~replicator.config.topology.TopicRules`, one function decides). Pure logic.
``acls``
    The Kafka ACLs a configuration needs for the topics its feeds select
    (:func:`~replicator.config.acls.required_acls`, what ``replicator acls`` prints). Pure logic.

Import order, without a circle: ``values`` <- ``clusters`` <- ``settings`` <- ``topology`` <-
``acls``; ``settings`` <- ``views`` and ``loading``. Every other package reads its configuration
from here; this package imports only :mod:`replicator.errors`.
"""

from replicator.config.clusters import ClusterSettings, FlowSettings
from replicator.config.loading import env_name, is_service_link, load_settings
from replicator.config.settings import Settings
from replicator.config.values import (
    DEFAULT_TOPIC_CONFIGS_EXCLUDE,
    DEFAULT_TOPICS_EXCLUDE,
    ENV_PREFIX,
    NESTED_DELIMITER,
    Compression,
    ConfigSync,
    DefaultsFrom,
    HeartbeatPlacement,
    Naming,
    OffsetResetPolicy,
    OversizePolicy,
    SaslMechanism,
    SecurityProtocol,
    StartPosition,
    TakeOver,
)
from replicator.config.views import ClientTimings, DeadLetterSettings, ProducerTuning

__all__ = [
    "DEFAULT_TOPICS_EXCLUDE",
    "DEFAULT_TOPIC_CONFIGS_EXCLUDE",
    "ENV_PREFIX",
    "NESTED_DELIMITER",
    "ClientTimings",
    "ClusterSettings",
    "Compression",
    "ConfigSync",
    "DeadLetterSettings",
    "DefaultsFrom",
    "FlowSettings",
    "HeartbeatPlacement",
    "Naming",
    "OffsetResetPolicy",
    "OversizePolicy",
    "ProducerTuning",
    "SaslMechanism",
    "SecurityProtocol",
    "Settings",
    "StartPosition",
    "TakeOver",
    "env_name",
    "is_service_link",
    "load_settings",
]
