"""``python -m replicator``: the same command line as ``replicator``."""

from replicator.cli import main

main()
