"""Where a first stage's candidates come from (``data.first_stage``): BM25 through pyserini or bm25s, or a run file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.cache import cache_root
from ..core.checks import check_range

BACKENDS = ("pyserini", "bm25s", "run")


@dataclass
class FirstStageConfig:
    """Where the candidates come from.

    Attributes:
        backend: ``pyserini``, ``bm25s`` or ``run``.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        retrieval_depth: candidates retrieved per query.
        run: the TREC run file for ``backend: run``.
        index_dir: where BM25 indexes are cached (default ``$RERANK_CACHE/indexes``); an index is reused
            while the collection's fingerprint is unchanged, and rebuilt otherwise.
        threads: search threads (0: all cores).
    """

    backend: str = "pyserini"
    k1: float = 0.9
    b: float = 0.4
    retrieval_depth: int = 1000
    run: str | None = None
    index_dir: str | None = None
    threads: int = 0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"first_stage.backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}")
        if self.backend == "run" and not self.run:
            raise ValueError("first_stage.run: backend 'run' needs the path of a TREC run file")
        check_range("first_stage.retrieval_depth", self.retrieval_depth, 1)

    @property
    def cache_root(self) -> Path:
        return Path(self.index_dir) if self.index_dir else cache_root() / "indexes"
