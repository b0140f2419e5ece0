"""``python -m rerank <command>``: the ``rerank`` command."""

from .cli import main

main()
