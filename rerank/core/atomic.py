"""Crash-safe writes: every file and folder rerank produces appears complete or not at all.

A file is written to a temporary sibling (same folder, hence the same file system), flushed to disk and renamed
over the target (``os.replace``, atomic on POSIX); a folder is built in a temporary sibling and swapped in the
same way. Temporary names carry the host and process id (``.NAME.tmp-HOST-PID-TOKEN``), so that the next
writer of the same target removes the leftovers of a killed process (:func:`remove_stale`) and never those of
one still running. Files and folders are created with the permissions of the user's umask, as any other tool.

    >>> with atomic_write(path) as handle:  # doctest: +SKIP
    ...     handle.write("...")
    >>> with atomic_directory(folder) as staging:  # doctest: +SKIP
    ...     (staging / "model.safetensors").write_bytes(...)
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)

_MARK = ".tmp-"


def temporary_sibling(path: Path) -> Path:
    """A fresh temporary name beside ``path``: ``.NAME.tmp-HOST-PID-TOKEN``."""
    return path.with_name(f".{path.name}{_MARK}{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}")


def _owner_is_gone(temporary: Path) -> bool:
    """Whether the process that made ``temporary`` (on this host) no longer runs."""
    host, _, rest = temporary.name.rpartition(_MARK)[2].rpartition("-")[0].rpartition("-")
    if host != socket.gethostname() or not rest.isdigit():
        return False
    try:
        os.kill(int(rest), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def remove_stale(path: Path) -> list[Path]:
    """Remove the temporaries that killed processes of this host left beside ``path``; the paths removed."""
    return _remove_stale(path.parent, f".{path.name}{_MARK}*")


def remove_stale_in(folder: Path) -> list[Path]:
    """Remove the temporaries that killed processes of this host left in ``folder``, whatever their target (after a
    child process that wrote there died); the paths removed."""
    return _remove_stale(folder, f".*{_MARK}*")


def _remove_stale(folder: Path, pattern: str) -> list[Path]:
    removed = []
    if not folder.is_dir():
        return removed
    for temporary in folder.glob(pattern):
        if _owner_is_gone(temporary):
            if temporary.is_dir() and not temporary.is_symlink():
                shutil.rmtree(temporary, ignore_errors=True)
            else:
                temporary.unlink(missing_ok=True)
            removed.append(temporary)
    if removed:
        logger.info("removed %d leftover(s) of interrupted writes: %s", len(removed),
                    ", ".join(str(p) for p in removed))
    return removed


@contextmanager
def atomic_write(path: str | Path, mode: str = "w", finish: Callable[[Path], None] | None = None) -> Iterator[IO]:
    """Write ``path`` through a temporary sibling, flushed and renamed into place on success only.

    ``mode`` is ``"w"`` (text, UTF-8) or ``"wb"``; ``finish`` is called with the complete temporary file just before
    it is renamed (:func:`rerank.core.cache.sealing` records its completion there).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    temporary = temporary_sibling(path)
    try:
        with open(temporary, mode.replace("w", "x"), **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if finish is not None:
            finish(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_directory(path: str | Path, replace: bool = True,
                     finish: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Build a folder in a temporary sibling and move it to ``path`` on success only.

    With ``replace``, an existing ``path`` is replaced once the new folder is complete. Without it (a cache entry
    that equal builders make alike), a ``path`` that another process completed meanwhile is kept and the new
    folder discarded. On failure the temporary folder is removed and ``path`` is left as it was. ``finish`` is
    called with the complete temporary folder just before it is moved (:func:`rerank.core.cache.sealing`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    staging = temporary_sibling(path)
    staging.mkdir()
    try:
        yield staging
        if finish is not None:
            finish(staging)
        _apply_umask(staging)
        if path.exists() and replace:
            retired = temporary_sibling(path)
            path.replace(retired)
            staging.replace(path)
            shutil.rmtree(retired, ignore_errors=True)
        elif not path.exists():
            try:
                staging.replace(path)
            except OSError:
                if not path.is_dir():  # not another builder's finished folder: a real failure
                    raise
        shutil.rmtree(staging, ignore_errors=True)  # when another builder's folder was kept
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _apply_umask(folder: Path) -> None:
    """Give what libraries wrote into ``folder`` the permissions of the user's umask (``transformers`` writes
    ``model.safetensors`` as 0600 whatever the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for item in folder.rglob("*"):
        if not item.is_symlink():
            item.chmod((0o777 if item.is_dir() else 0o666) & ~umask)
