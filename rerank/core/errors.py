"""The error rerank raises for a situation its user can mend (a file in use, a missing dependency, a process that
ran out of memory): :class:`UserError`. The command line prints it, like the ``ValueError`` and ``OSError`` that
rerank raises with a message for bad options and input, as one line (:mod:`rerank.cli.failures`); anything else is a
bug, and shows its traceback. A full disk or a folder that cannot be written stays the user's to mend however a
library wrapped it (:func:`environment_fault`)."""

from __future__ import annotations

import errno
import os

ENVIRONMENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EPERM)
"""The errors of the machine rather than of rerank: a full disk, a quota, a folder that cannot be written."""


class UserError(RuntimeError):
    """Something the user can mend, said in one line that names what to do."""


def environment_fault(error: BaseException | None) -> OSError | None:
    """The full disk, quota or unwritable folder behind ``error``, however a library wrapped it (``datasets``'
    ``DatasetGenerationError``, an ``ArrowIOError``, a Java ``IOException`` passed on as text), or None.

    Returns:
        an OSError with the errno and, where the cause named it, the path.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in ENVIRONMENT_ERRNOS:
            return error
        text = str(error)
        for code in ENVIRONMENT_ERRNOS:
            if os.strerror(code) in text:
                return OSError(code, os.strerror(code))
        error = error.__cause__ or error.__context__
    return None
