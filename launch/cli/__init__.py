"""The ``hierarl`` command line: ``main`` (the subcommands), ``eval``, ``rollout`` and ``sweep``."""
