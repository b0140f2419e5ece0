"""How every command ends on an error: a user's mistake as one line, ``error: ...``, and exit status 2; a bug with its
traceback and a line that asks for a report, exit status 1.

A user's mistake is what rerank raises for bad options, input or surroundings: its
:class:`~rerank.core.errors.UserError`, and the ``ValueError`` and ``OSError`` (``FileNotFoundError``, ...) it raises
with a message; and Lightning's
``MisconfigurationException``. Anything else (a shape mismatch in torch, a failure on a GPU, an ``AssertionError``,
a ``TypeError``) is a bug in rerank or a library it uses: its traceback is shown.

A command stopped by SIGTERM or SIGINT says what it kept and exits with 128 + the signal
(:mod:`rerank.core.preemption`).

Torch-free, like :mod:`rerank.cli.configs` and :mod:`rerank.cli.schema`: the ``rerank`` dispatcher answers
``--help`` and rejects mistyped options before the heavy libraries load.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from ..core import preemption
from ..core.errors import UserError, environment_fault

DEBUG = "RERANK_DEBUG"
"""Set this environment variable (to 1) to see the traceback of a user error instead of its message alone."""
USER_ERRORS = (ValueError, OSError, UserError)
"""The exceptions that carry a message for the user (rerank raises them for bad options, input and surroundings)."""
BUG = ("this is a bug in rerank or in a library it uses, not a mistake of yours: please report it with the traceback "
       "above and the command that gave it")
LIBRARY_USER_ERRORS = {"lightning.pytorch.utilities.exceptions": "MisconfigurationException"}
"""Library exceptions that mean the same, by module (looked up only if the library was loaded)."""


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` is a mistake in options or input rather than a bug."""
    if isinstance(error, USER_ERRORS):
        return True
    for module, name in LIBRARY_USER_ERRORS.items():
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(error, getattr(loaded, name)):
            return True
    return False


def run(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> None:
    """Run a command's ``main``; a user error prints one line (its message) and exits 2, unless ``RERANK_DEBUG``
    is set, which shows the traceback; any other error shows its traceback, says it is a bug, and exits 1. SIGTERM
    and SIGINT stop it cleanly (:mod:`rerank.core.preemption`): one line that says what was kept, exit status 128 +
    the signal."""
    try:
        with preemption.handled():
            main(argv)
    except preemption.Preempted as stopped:
        print(f"rerank: {stopped}", file=sys.stderr)
        raise SystemExit(stopped.exit_status) from None
    except Exception as error:
        fault = None if is_user_error(error) else environment_fault(error)
        if fault is not None and not os.environ.get(DEBUG):  # a full disk or a folder that cannot be written
            where = f"{fault.filename}: " if fault.filename else ""
            print(f"error: {where}{fault.strerror or fault} ({type(error).__name__}: {_first_line(error)})",
                  file=sys.stderr)
            print(f"(set {DEBUG}=1 for the traceback)", file=sys.stderr)
            raise SystemExit(2) from None
        if is_user_error(error) and not os.environ.get(DEBUG):
            print(f"error: {error}", file=sys.stderr)
            print(f"(set {DEBUG}=1 for the traceback)", file=sys.stderr)
            raise SystemExit(2) from None
        if is_user_error(error):
            raise
        traceback.print_exc()
        print(f"\n{BUG}", file=sys.stderr)
        raise SystemExit(1) from None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:200]
