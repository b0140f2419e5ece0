"""The error rerank raises for a situation its user can mend (a file in use, a missing dependency, a process that
ran out of memory): :class:`UserError`. The command line prints it, like the ``ValueError`` and ``OSError`` that
rerank raises with a message for bad options and input, as one line (:mod:`rerank.cli.errors`); anything else is a
bug, and shows its traceback."""

from __future__ import annotations


class UserError(RuntimeError):
    """Something the user can mend, said in one line that names what to do."""
