"""Batching across requests: concurrent requests are scored together, in a bounded queue.

Each request becomes a :class:`Job` (a query, its documents, their first-stage scores) that :meth:`Batcher.submit`
puts in a queue and answers with a :class:`concurrent.futures.Future`. One scoring thread takes the queued jobs, as
many as fit ``batch_pairs`` pairs (a job larger than that goes alone), waits up to ``max_wait`` seconds after the
first job arrived for others to join while the batch is not full, and scores them in one call of ``score``
(:meth:`rerank.inference.reranker.Reranker.rerank_many`, which sorts the pairs of every query by length and cuts them
into forward passes, as ``rerank predict`` does). A job's scores depend on its own query and documents only (the fused
ranker standardises each query's scores over that query's candidates), so whatever batch a request lands in, it gets
the scores that :meth:`~rerank.inference.reranker.Reranker.rerank` gives.

The queue holds at most ``max_queue_pairs`` pairs: a job that would exceed it is refused at once
(:class:`QueueFull`), so memory stays bounded whatever the load. A batch whose scoring fails is scored again one job
at a time, so that a failure is the failing request's alone. A job whose future was cancelled before its batch
began (its client went away) is dropped unscored.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field


@dataclass
class Job:
    """One request's work: its scores come back through ``future``, in the order of ``documents``."""

    query: str
    documents: Sequence[str]
    first_stage_scores: Sequence[float] | None = None
    future: Future = field(default_factory=Future)
    queued_at: float = field(default_factory=time.monotonic)

    @property
    def pairs(self) -> int:
        return len(self.documents)


class QueueFull(Exception):
    """The queue has no room for a job's pairs: the server is at capacity (answered with 503 and Retry-After)."""


Score = Callable[[list[Job]], list[list[float]]]
"""Scores a batch of jobs: for each job, one score per document."""


class Batcher:
    """A bounded queue of jobs and the thread that scores them in batches (see the module docstring).

    Args:
        score: scores a batch of jobs.
        batch_pairs: the most pairs a batch takes (a larger job is a batch of its own).
        max_wait: seconds the first job of a batch waits for others while the batch is not full.
        max_queue_pairs: the most pairs waiting.
    """

    def __init__(self, score: Score, batch_pairs: int, max_wait: float, max_queue_pairs: int) -> None:
        self.score, self.batch_pairs, self.max_wait = score, batch_pairs, max_wait
        self.max_queue_pairs = max_queue_pairs
        self._jobs: deque[Job] = deque()
        self._queued_pairs = 0
        self._closed = False
        self._changed = threading.Condition()
        self.scored = {"requests": 0, "batches": 0, "pairs": 0}
        """What was scored so far (``GET /info`` shows it): jobs, batches, pairs."""
        self._thread = threading.Thread(target=self._work, name="rerank-batcher", daemon=True)
        self._thread.start()

    @property
    def queued_pairs(self) -> int:
        """Pairs waiting to be scored."""
        return self._queued_pairs

    def submit(self, job: Job) -> Future:
        """Queue ``job``; its future gets its scores (or the scorer's exception).

        Raises:
            QueueFull: the queue has no room for the job's pairs.
        """
        with self._changed:
            if self._closed:
                raise QueueFull("the server is shutting down")
            if self._queued_pairs + job.pairs > self.max_queue_pairs:
                raise QueueFull(f"{self._queued_pairs} pairs are queued; the queue holds {self.max_queue_pairs}")
            self._jobs.append(job)
            self._queued_pairs += job.pairs
            self._changed.notify()
        return job.future

    def close(self) -> None:
        """Score what is queued, then stop the scoring thread."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        self._thread.join()

    def _next_batch(self) -> list[Job] | None:
        """The next batch (None once closed and empty): jobs in arrival order while they fit ``batch_pairs``."""
        with self._changed:
            while not self._jobs and not self._closed:
                self._changed.wait()
            if not self._jobs:
                return None
            deadline = self._jobs[0].queued_at + self.max_wait
            while (not self._closed and self._queued_pairs < self.batch_pairs
                   and (left := deadline - time.monotonic()) > 0):
                self._changed.wait(left)
            batch, pairs = [], 0
            while self._jobs and (not batch or pairs + self._jobs[0].pairs <= self.batch_pairs):
                job = self._jobs.popleft()
                self._queued_pairs -= job.pairs
                if job.future.set_running_or_notify_cancel():  # False: its client went away
                    batch.append(job)
                    pairs += job.pairs
            return batch

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            if batch:
                self._score(batch)

    def _score(self, batch: list[Job]) -> None:
        """Score ``batch``; if that fails, each job alone, so that a job's failure reaches its own request only."""
        try:
            scores = self.score(batch)
        except Exception as error:
            if len(batch) == 1:  # its own request learns of it (and the server logs it)
                batch[0].future.set_exception(error)
                return
            for job in batch:
                self._score([job])
            return
        self.scored["requests"] += len(batch)
        self.scored["batches"] += 1
        self.scored["pairs"] += sum(job.pairs for job in batch)
        for job, job_scores in zip(batch, scores):
            job.future.set_result(job_scores)
