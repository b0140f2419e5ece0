"""``python -m rerank.fit``: ``rerank fit`` under the name of earlier releases (same options, same behaviour)."""

from .cli.arguments import run
from .cli.fit import main

if __name__ == "__main__":
    run(main)
