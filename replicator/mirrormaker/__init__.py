"""MirrorMaker configurations, translated into the replicator's own.

This package owns the translation of

- a MirrorMaker 1 (or Go mirror maker) command line and the Java ``.properties`` files it names
  (``--consumer.config``, ``--producer.config``): :func:`mirror_maker_translation`, and
- a MirrorMaker 2 ``connect-mirror-maker.properties`` file: :func:`mm2_translation`

into ``REPLICATOR_*`` environment variables, validated by
:func:`replicator.config.loading.load_settings` like any other environment. It runs nothing and
connects to nothing; the CLI (``replicator mirror-maker``, ``replicator mm2``) runs the service
with the result.

Nothing is dropped silently. Every option or property is either translated, accepted with one
*note* saying what happens instead (``num.streams``: partitions are the unit of concurrency), or
refused with :class:`~replicator.errors.ConfigError` naming the option, or the property and its
file (``zk.connect (in consumer.config)``). Errors that :func:`load_settings` finds in the
translated variables are re-attributed to the option or property that produced them
(:attr:`Translation.origins`). SASL passwords never appear in notes or errors, and
:meth:`Translation.shown_env` masks them.

Modules: ``translation`` (the result and its builder), ``properties`` (Java ``.properties`` files,
read as Java reads them), ``names`` (aliases, flow names),
``values`` (files, booleans, numbers), ``regex`` (topic rules), ``connection`` (one cluster's
connection), ``clients`` (client properties), ``mm1`` and ``mm2`` (the two inputs),
``mm2_heartbeats`` (MirrorMaker 2's heartbeat properties).
"""

from __future__ import annotations

from replicator.mirrormaker.mm1 import mirror_maker_translation
from replicator.mirrormaker.mm2 import mm2_translation
from replicator.mirrormaker.translation import Translation

__all__ = ["Translation", "mirror_maker_translation", "mm2_translation"]
