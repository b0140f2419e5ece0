"""``python -m rerank.fit``, the documented entry point of training: ``rerank fit`` (the same options and behaviour,
through the same dispatcher: its help and option checks answer before torch loads)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """``rerank fit`` with ``argv`` (default: the command line)."""
    from .cli import main as rerank

    rerank(["fit", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
