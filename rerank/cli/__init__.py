"""The ``rerank`` command: ``rerank <command> [options]`` (``python -m rerank <command>`` is the same).

Every command parses its options the same way (:mod:`rerank.cli.arguments`): ``--config`` files that stack,
bare names of the configs rerank ships, and options spelled as in the YAML (``--data.first_stage.backend bm25s``).
A user error prints one line and exits with status 2 (``RERANK_DEBUG=1`` shows the traceback).

This module and the ones it loads first (:mod:`~rerank.cli.configs`, :mod:`~rerank.cli.schema`,
:mod:`~rerank.cli.failures`) import neither torch nor Lightning: ``rerank --help``, ``rerank <command> --help``
and a mistyped option or config file are answered before the command's libraries load.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ..version import DISTRIBUTION, __version__
from .commands import COMMANDS, HELP_ALL
from .failures import run

HELP = ("-h", "--help")
VERSION = ("-V", "--version")


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: rerank <command> [options]   (rerank <command> --help for its options; rerank --version)", "",
             "commands:"]
    return "\n".join([*lines, *(f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items())])


def main(argv: list[str] | None = None) -> None:
    """Dispatch ``rerank <command> ...`` to ``rerank.cli.<command>.main``, after the torch-free checks."""
    arguments = sys.argv[1:] if argv is None else argv
    if not arguments or arguments[0] in HELP:
        print(usage())
        raise SystemExit(0 if arguments else 2)
    if arguments[0] in VERSION:
        print(f"rerank {__version__} (the {DISTRIBUTION} package)")
        raise SystemExit(0)
    command, *options = arguments
    if command not in COMMANDS:
        print(f"rerank: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        raise SystemExit(2)
    run(lambda _: dispatch(command, options))


def run_command(command: str, options: list[str]) -> Any:
    """``rerank <command> <options>`` in this process, without the one-line handling of user errors (they raise):
    what the command returns (``fit``: the test metrics). The public way for scripts to run a command
    (``rerank.run_command``)."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
    return importlib.import_module(f"{__name__}.{command}").main(options)


def dispatch(command: str, options: list[str]) -> None:
    """``--help`` from the cached help, the cached options' checks, then the command itself."""
    from . import schema
    from .configs import resolve_configs

    every = HELP_ALL in options  # every option the command accepts, not only those it reads
    if every or (len(options) == 1 and options[0] in HELP):
        print(schema.help_text(command, every), end="")
        return
    if not any(option in HELP for option in options):
        schema.check(command, resolve_configs(options))
    importlib.import_module(f"{__name__}.{command}").main(options)
