"""How every command reports a user's mistake: one line, ``error: ...``, and exit status 2 (no traceback).

Torch-free, like :mod:`rerank.cli.configs` and :mod:`rerank.cli.schema`: the ``rerank`` dispatcher answers
``--help`` and rejects mistyped options before the heavy libraries load.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

DEBUG = "RERANK_DEBUG"
"""Set this environment variable (to 1) to see the traceback of a user error instead of its message alone."""
USER_ERRORS = (ValueError, OSError, RuntimeError)
"""The exceptions that carry a message for the user (rerank raises them for bad options and input)."""
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
    is set, which shows the traceback."""
    try:
        main(argv)
    except Exception as error:
        if not is_user_error(error) or os.environ.get(DEBUG):
            raise
        print(f"error: {error}", file=sys.stderr)
        print(f"(set {DEBUG}=1 for the traceback)", file=sys.stderr)
        raise SystemExit(2) from None
