"""The options of rerank's commands as dataclasses that import neither torch nor Lightning: what the command line
builds from a config before any work (every value checked in a fraction of a second, :mod:`rerank.cli.values`), and
what the layers that use them take."""
