"""Serving under load: ``rerank serve`` driven over HTTP by concurrent clients, against the same pairs scored offline
and against Infinity (a re-rank server built for throughput) serving the same folder.

Requests are a Cranfield query and its BM25 top ``n`` documents with their BM25 scores (``n`` in ``--documents``),
sent by ``c`` concurrent clients (``--clients``; each sends its next request when its previous one is answered) to a
server on 127.0.0.1 only, each round bounded by ``--requests`` requests a client and ``--seconds`` of wall clock.
For each server, each ``n`` and each ``c``: pairs scored a second, and the p50 and p99 latency of a request. The
servers run one at a time: ``rerank serve`` with the pure cross-encoder (``--ranker reranker``, what Infinity can
serve too), ``rerank serve`` with the export's deployed ranker (a ``fused`` one twice: on documents new to it, its
teacher's memory off, and on documents seen before, every request sent once first), and Infinity with the pure
cross-encoder when
``--infinity`` gives the Python of an environment where ``infinity-emb`` is installed (it pins libraries that
rerank's own environment cannot have: ``make bench-serve`` builds ``.venv-infinity``). Offline, in this process: the
pairs per second of ``Reranker.rerank_many`` over the same requests (the scoring loop of ``rerank predict``; best of
``--repeats`` passes, so a ``fused`` ranker's with its documents in memory, and once more without memory) and the
latency of one ``Reranker.rerank`` call of ``n`` documents. Every answer's scores are checked against the offline
ones (the raw scores, ``raw_scores``; within 1e-5 in float32, :data:`FAST_TOLERANCE` in bf16 or int8; Infinity's
against the sigmoid of the pure cross-encoder's). ``--precision`` is what rerank scores in, offline and served
(``auto``: the fastest path that passed the export's gate and that the CPU runs fast).

    python scripts/benchmarks/bench_serve.py --model runs/cranfield/model --output docs/experiments/bench_serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import torch
from rich.console import Console
from rich.table import Table

from rerank import Collection, CollectionConfig, FirstStageConfig, Reranker, retrieve

CRANFIELD = CollectionConfig(ir_datasets="cranfield", label_map={-1: 0, 1: 4, 2: 3, 3: 2, 4: 1})
TOLERANCE = 1e-5
FAST_TOLERANCE = 0.05
"""How far a served bf16 or int8 score may be from the offline one: their rounding depends on the batch a pair is
scored in, which differs between the server (requests batched together) and offline."""


@dataclass(frozen=True)
class Request:
    query: str
    documents: list[str]
    first_stage_scores: list[float]


NEW = "new documents"
SEEN = "documents seen before"


@dataclass(frozen=True)
class Variant:
    """A server the rounds measure: ``rerank serve --ranker RANKER`` with ``options``; ``visit``: every request
    of the pool is sent once before the rounds (a deployed ``fused`` ranker's teacher then has each document's
    embedding in memory)."""

    ranker: str
    name: str
    options: list[str] = field(default_factory=list)
    visit: bool = False


@dataclass
class Round:
    server: str
    documents: int
    clients: int
    requests: int
    pairs_per_second: float
    p50_ms: float
    p99_ms: float


def requests(documents: int, count: int) -> list[Request]:
    """The first ``count`` Cranfield queries, each with its BM25 top ``documents`` and their scores."""
    collection = Collection(CRANFIELD)
    query_ids = sorted(collection.queries, key=int)[:count]
    run = retrieve(collection, FirstStageConfig(backend="bm25s", retrieval_depth=documents),
                   {qid: collection.queries[qid] for qid in query_ids})
    return [Request(collection.queries[qid], [collection.documents.text(doc) for doc in run[qid]],
                    list(run[qid].values())) for qid in query_ids if len(run[qid]) == documents]


def relative(argument: str) -> str:
    """A command-line argument as the report records it: an absolute path relative to the working folder (no
    machine's layout in a committed report)."""
    return os.path.relpath(argument) if os.path.isabs(argument) else argument


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def offline(reranker: Reranker, pool: list[Request], repeats: int) -> dict[str, float]:
    """Pairs a second of ``rerank_many`` over the pool (best of ``repeats``), and one ``rerank`` call's latency."""
    queries = {str(i): request.query for i, request in enumerate(pool)}
    candidates = {str(i): {str(j): text for j, text in enumerate(request.documents)} for i, request in enumerate(pool)}
    first_stage = {str(i): {str(j): s for j, s in enumerate(request.first_stage_scores)} for i, request in
                   enumerate(pool)}
    needs = reranker.deployment.needs_first_stage
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        reranker.rerank_many(queries, candidates, first_stage if needs else None)
        best = min(best, time.perf_counter() - start)
    latencies = []
    for request in pool:
        start = time.perf_counter()
        reranker.rerank(request.query, request.documents, first_stage_scores=request.first_stage_scores if needs
                        else None)
        latencies.append(time.perf_counter() - start)
    pairs = sum(len(request.documents) for request in pool)
    return {"pairs_per_second": pairs / best, "p50_ms": 1000 * percentile(latencies, 0.5),
            "p99_ms": 1000 * percentile(latencies, 0.99)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """A server in a subprocess on 127.0.0.1, ready once ``ready_path`` answers 200; stopped by SIGTERM."""

    def __init__(self, command: list[str], port: int, ready_path: str, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = log.open("w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[:4]} did not start: see {log}")
            try:
                if httpx.get(f"{self.url}{ready_path}", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


Body = Callable[[Request], dict]
Check = Callable[[Request, dict], None]


async def load(url: str, pool: list[Request], clients: int, per_client: int, seconds: float, body: Body,
               check: Check) -> tuple[list[float], int, float]:
    """``clients`` clients, each sending the pool's requests in turn (from its own place in it) until it has sent
    ``per_client`` or ``seconds`` have passed; the latencies, the pairs answered and the wall time."""
    latencies: list[float] = []
    pairs = 0
    start = time.perf_counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(number: int, session: httpx.AsyncClient) -> None:
        nonlocal pairs
        for sent in range(per_client):
            if sent and time.perf_counter() - start > seconds:
                return
            request = pool[(number * 7 + sent) % len(pool)]
            began = time.perf_counter()
            answer = await session.post(url, json=body(request))
            latencies.append(time.perf_counter() - began)
            answer.raise_for_status()
            check(request, answer.json())
            pairs += len(request.documents)

    async with httpx.AsyncClient(timeout=600, limits=limits) as session:
        await asyncio.gather(*(client(number, session) for number in range(clients)))
    return latencies, pairs, time.perf_counter() - start


def rounds(name: str, url: str, pools: dict[int, list[Request]], args: argparse.Namespace, body: Body,
           check: Callable[[int], Check], visit: bool = False) -> list[Round]:
    results = []
    for documents, pool in pools.items():
        warm = (1, len(pool)) if visit else (2, 2)  # (clients, requests each): the whole pool once, or a little
        asyncio.run(load(url, pool, *warm, math.inf, body, check(documents)))
        for clients in args.clients:
            latencies, pairs, wall = asyncio.run(load(url, pool, clients, args.requests, args.seconds, body,
                                                      check(documents)))
            results.append(Round(name, documents, clients, len(latencies), pairs / wall,
                                 1000 * percentile(latencies, 0.5), 1000 * percentile(latencies, 0.99)))
            print(json.dumps(asdict(results[-1])), flush=True)
    return results


def expected_scores(reranker: Reranker, pool: list[Request]) -> dict[tuple[str, int], list[float]]:
    needs = reranker.deployment.needs_first_stage
    return {(request.query, len(request.documents)): reranker.score(
        request.query, request.documents, request.first_stage_scores if needs else None) for request in pool}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a folder exported by rerank fit")
    parser.add_argument("--documents", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--queries", type=int, default=64, help="Cranfield queries the requests are made of")
    parser.add_argument("--requests", type=int, default=32, help="the most requests a client sends in a round")
    parser.add_argument("--seconds", type=float, default=60, help="a round stops sending after this long")
    parser.add_argument("--repeats", type=int, default=2, help="offline passes (the best counts)")
    parser.add_argument("--precision", default="32", help="what rerank's cross-encoder scores in, offline and served "
                                                           "(32, bf16, int8, auto: rerank.inference.fast_scoring)")
    parser.add_argument("--infinity", default=None, help="the Python of an environment with infinity-emb")
    parser.add_argument("--logs", type=Path, default=Path("outputs/bench_serve"))
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    pools = {n: requests(n, args.queries) for n in args.documents}
    report: dict = {"machine": machine(), "command": " ".join(relative(argument) for argument in sys.argv),
                    "offline": {}, "rounds": []}
    rerankers = {ranker: Reranker.from_pretrained(args.model, ranker=ranker, precision=args.precision, device="cpu")
                 for ranker in ("reranker", "deployed")}
    report["precision"], fast = rerankers["reranker"].precision_reason, rerankers["reranker"].precision != "32"
    tolerance = FAST_TOLERANCE if fast else TOLERANCE
    report["deployed"] = deployed = rerankers["deployed"].deployment.describe()
    expected = {ranker: {n: expected_scores(reranker, pool) for n, pool in pools.items()}
                for ranker, reranker in rerankers.items()}
    variants = [Variant("reranker", "pure"), Variant("deployed", deployed)]
    if rerankers["deployed"].memo is not None:  # its teacher embeds documents: once, or each time
        rerankers[NEW] = Reranker.from_pretrained(args.model, precision=args.precision, device="cpu", remember=0)
        variants = [variants[0], Variant("deployed", f"{deployed}, {NEW}", ["--serve.remember", "0"]),
                    Variant("deployed", f"{deployed}, {SEEN}", visit=True)]
    for ranker, reranker in rerankers.items():  # the deployed one's best pass has its documents in memory
        for n, pool in pools.items():
            report["offline"][f"{ranker} {n}"] = offline(reranker, pool, args.repeats)
            print(ranker, n, json.dumps(report["offline"][f"{ranker} {n}"]), flush=True)
    del rerankers
    report["rounds"] += served_rounds(args, variants, pools, expected, tolerance)
    if args.infinity:
        try:
            report["rounds"] += [asdict(r) for r in infinity_rounds(args, pools, expected["reranker"])]
        except (RuntimeError, AssertionError, httpx.HTTPError) as error:  # recorded: the rounds above stand
            report["infinity_failed"] = f"{type(error).__name__}: {error}"
            print(f"Infinity: {report['infinity_failed']}", flush=True)
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    show(report)
    return report


def served_rounds(args: argparse.Namespace, variants: list[Variant], pools: dict[int, list[Request]],
                  expected: dict[str, dict[int, dict[tuple[str, int], list[float]]]], tolerance: float) -> list[dict]:
    """The rounds of each ``rerank serve`` variant, one server at a time, every answer checked against its ranker's
    offline scores."""
    results: list[dict] = []
    for variant in variants:
        ranker, port = variant.ranker, free_port()
        served = Served([sys.executable, "-m", "rerank", "serve", "--model.model_name", args.model, "--ranker", ranker,
                         "--serve.port", str(port), "--serve.max_documents", str(max(args.documents)),
                         "--serve.precision", args.precision, "--serve.device", "cpu", *variant.options], port,
                        "/ready", args.logs / f"rerank-{ranker}{'-remember-0' if variant.options else ''}.log")

        def check(n: int, ranker: str = ranker) -> Check:
            def agrees(request: Request, answer: dict) -> None:
                scores = expected[ranker][n][(request.query, n)]
                assert all(abs(r["relevance_score"] - scores[r["index"]]) <= tolerance for r in answer["results"])
            return agrees

        try:
            results += [asdict(r) for r in rounds(
                f"rerank serve ({variant.name})", f"{served.url}/v2/rerank", pools, args,
                lambda request: {"model": "rerank", "raw_scores": True, **asdict(request)}, check, variant.visit)]
        finally:
            served.stop()
    return results


def machine() -> dict:
    """The CPU, its cores and threads, Python's and torch's versions."""
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(), "torch": torch.__version__}


def infinity_rounds(args: argparse.Namespace, pools: dict[int, list[Request]],
                    expected: dict[int, dict[tuple[str, int], list[float]]]) -> list[Round]:
    """The same rounds against Infinity serving the pure cross-encoder of the same folder (its scores are the
    sigmoid of the cross-encoder's, which are checked)."""
    port = free_port()
    served = Served([args.infinity, "-m", "infinity_emb.cli", "v2", "--model-id", str(Path(args.model).resolve()),
                     "--port", str(port), "--host", "127.0.0.1", "--device", "cpu", "--engine", "torch",
                     "--batch-size", "32", "--no-bettertransformer"], port, "/health", args.logs / "infinity.log")
    model = str(Path(args.model).resolve())

    def check(n: int) -> Check:
        def agrees(request: Request, answer: dict) -> None:
            # one score a document; Infinity cuts a pair to the tokenizer's 256 tokens its own way (the longest of
            # the two texts first), rerank as the model was trained (the query at most 128, then the document), so
            # its sigmoid scores are recorded against ours, not required to equal them
            assert sorted(r["index"] for r in answer["results"]) == list(range(n))
            scores = expected[n][(request.query, n)]
            differences.extend(abs(r["relevance_score"] - 1 / (1 + math.exp(-scores[r["index"]])))
                               for r in answer["results"])
        return agrees

    differences: list[float] = []

    try:
        results = rounds("Infinity (pure)", f"{served.url}/rerank", pools, args,
                         lambda request: {"model": model, "query": request.query, "documents": request.documents},
                         check)
    finally:
        served.stop()
    ordered = sorted(differences)
    print(f"Infinity's scores against the sigmoid of rerank's pure ones: median difference "
          f"{ordered[len(ordered) // 2]:.2e}, largest {ordered[-1]:.2e}", flush=True)
    return results


def show(report: dict) -> None:
    table = Table(title=f"serving under load ({report['machine']['cores']} cores)")
    for column in ("server", "documents", "clients", "requests", "pairs/s", "p50 ms", "p99 ms"):
        table.add_column(column, justify="left" if column == "server" else "right")
    for item in report["rounds"]:
        table.add_row(item["server"], str(item["documents"]), str(item["clients"]), str(item["requests"]),
                      f"{item['pairs_per_second']:.0f}", f"{item['p50_ms']:.0f}", f"{item['p99_ms']:.0f}")
    for name, values in report["offline"].items():
        table.add_row(f"offline {name}", name.split()[-1], "-", "-", f"{values['pairs_per_second']:.0f}",
                      f"{values['p50_ms']:.0f}", f"{values['p99_ms']:.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
