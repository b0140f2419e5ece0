"""rerank's version: the one that ``rerank --version``, the server's ``/info``, the package's metadata and the
changelog's newest heading give."""

__version__ = "0.1.0.dev0"
DISTRIBUTION = "rerank-lightning"
"""The name it is installed by (``pip install rerank-lightning``); the package it imports is ``rerank``."""
