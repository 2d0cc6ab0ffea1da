"""Checks of the repository's own files rather than of the product's behaviour: the deploy
manifests, alert rules and dashboard, the documentation site, the examples, the package layout
and the suite's markers. No broker; they run in ``make test`` and ``make unit``."""
