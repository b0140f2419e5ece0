"""The server's settings: ``serve:`` in the YAML, ``--serve.port 8080`` on the command line."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from ..core.checks import check_range
from .precision import SCORING_CHOICES

API_KEY = "RERANK_API_KEY"
"""The environment variable that gives the server's key when ``serve.api_key`` does not."""


@dataclass(frozen=True)
class ServeConfig:
    """How ``rerank serve`` listens, batches and refuses.

    Attributes:
        host: the address to listen on (``0.0.0.0`` for every interface).
        port: the TCP port (0: a free one, printed when the server listens).
        max_documents: the most documents (``documents``, ``texts``) one request may send.
        max_body_bytes: the largest request body; a larger one is refused (413) before it is read whole.
        batch_pairs: the most (query, document) pairs scored together, from however many requests.
        max_wait_ms: how long the first request of a batch waits for others to join it (0: the batch is whatever
            is queued when the scorer is free).
        max_queue_pairs: the most pairs waiting to be scored; a request that would exceed it is refused (503 with
            ``Retry-After``), so the server's memory stays bounded under any load.
        batch_size: rows per forward pass of the cross-encoder (length-sorted, as ``rerank predict`` sorts them).
        device: ``cpu``, ``cuda``, ``cuda:1``, ... (default: CUDA when there is one).
        precision: what the cross-encoder scores in (:data:`rerank.config.precision.SCORING_CHOICES`; ``auto``: the
            fastest that passed the export's quality gate and that this CPU runs fast; ``int8`` on a CPU).
        graceful_seconds: after SIGTERM, how long requests in flight may take to finish before the server exits.
        remember: the teacher's embeddings of this many distinct documents are kept (a deployed ``fused`` ranker's
            bi-encoder embeds a document seen before from memory: about 1.5 KB each for MiniLM; 0: none).
        api_key: the key a client must send (``Authorization: Bearer KEY``) to re-rank and read ``/info``; else
            ``$RERANK_API_KEY``; neither: no key. The environment variable is the safer of the two (a command line is
            visible to the machine's other users); the key is never logged nor shown.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    max_documents: int = 1000
    max_body_bytes: int = 8 * 2**20
    batch_pairs: int = 1024
    max_wait_ms: float = 2.0
    max_queue_pairs: int = 16384
    batch_size: int = 32
    device: str | None = None
    precision: str = "32"
    graceful_seconds: float = 30.0
    remember: int = 50_000
    api_key: str | None = None

    def __post_init__(self) -> None:
        check_range("port", self.port, 0, 65535)
        for name in ("max_documents", "max_body_bytes", "batch_pairs", "batch_size"):
            check_range(name, getattr(self, name), 1)
        check_range("max_queue_pairs", self.max_queue_pairs, self.max_documents)
        check_range("max_wait_ms", self.max_wait_ms, 0)
        check_range("graceful_seconds", self.graceful_seconds, 0)
        check_range("remember", self.remember, 0)
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key must not be empty (leave it out for a server without a key)")
        if self.precision not in SCORING_CHOICES:
            raise ValueError(f"precision must be one of {', '.join(SCORING_CHOICES)}; got {self.precision!r}")

    def key(self) -> str | None:
        """The key clients must send: ``api_key``, else ``$RERANK_API_KEY`` (None: no key)."""
        return self.api_key or os.environ.get(API_KEY) or None

    def __repr__(self) -> str:  # the key never reaches a log or an error message
        shown = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "api_key"}
        return f"ServeConfig({', '.join(f'{name}={value!r}' for name, value in shown.items())}, api_key=...)"
