"""The command line (``replicator``, typer): what an operator types.

``commands``
    Every command: ``run`` (the service), ``mirror-maker`` and ``mm2`` (the service, configured
    by MirrorMaker's options or properties file), ``demo``, ``sandbox``, the operator commands and
    the Spark jobs; ``--version``; invalid configuration exits 2 naming the variable, and a
    command whose extra is not installed exits 2 saying how to install it.
``arguments``
    What the commands share: the configuration each reads (the REPLICATOR_* variables, or a
    MirrorMaker file or command line), the options selecting it, the checks of cluster aliases
    and topic names, the extras a command needs; each exits 2 naming what is at fault.
``jobs``
    The Spark jobs' commands, ``backfill`` and ``audit`` (their work: :mod:`replicator.spark`).
``operations``
    The operator commands' work: ``check-config``, ``lag``, ``topics ensure``.
``helptext``
    How ``--help`` is laid out: click's plain help, wrapped at spaces only.
``reference``
    The documentation's reference pages (configuration, metrics, this command line, the HTTP
    endpoints), generated from the code: ``python -m replicator.cli.reference --update``
    rewrites them, a unit test fails when one is out of date.

The console script ``replicator`` and ``python -m replicator`` call :func:`main`.
"""

from replicator.cli.commands import app, main

__all__ = ["app", "main"]
