"""Re-rank a TREC run: ``python -m rerank.rerank --model DIR --run bm25.run --collection cranfield --out new.run``.

``--collection`` is a config (path, or bare name in ``configs/``; its ``data.collection`` section is used) or an
``ir_datasets`` id. The top ``--depth`` documents of every query are scored by the model; the written run holds
them, best first. When the collection has qrels, the metrics of the input run (cut at the same depth) and of the
re-ranked run are printed as JSON. Every document of the run must exist in the collection, and every query
(checked before any scoring).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from .config import build, load_config
from .data.collection import Collection, CollectionConfig, Documents
from .data.trec import Run, read_run, write_run
from .evaluation import METRICS, evaluate
from .reranker import PRECISIONS, Reranker


def collection_config(name: str) -> CollectionConfig:
    """The ``data.collection`` section of config ``name``, or the ``ir_datasets`` id ``name``."""
    try:
        config = load_config([name])
    except FileNotFoundError:
        return CollectionConfig(ir_datasets=name)
    return build(CollectionConfig, (config.get("data") or {}).get("collection"), f"{name}: data.collection")


class CandidateTexts(Mapping[str, str]):
    """One query's candidates, ``{doc id: text}``, with each text read from the collection when it is scored."""

    def __init__(self, doc_ids: Iterable[str], documents: Documents) -> None:
        self.doc_ids, self.documents = list(doc_ids), documents

    def __getitem__(self, doc_id: str) -> str:
        return self.documents.text(doc_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self.doc_ids)

    def __len__(self) -> int:
        return len(self.doc_ids)


def top(run: Run, depth: int) -> Run:
    """The ``depth`` best documents of each query (ties by doc id)."""
    return {qid: dict(sorted(docs.items(), key=lambda item: (-item[1], item[0]))[:depth]) for qid, docs in run.items()}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(prog="python -m rerank.rerank", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an exported folder or a cross-encoder (hub id or path)")
    parser.add_argument("--run", required=True, type=Path, help="the TREC run to re-rank")
    parser.add_argument("--collection", required=True, help="a config with data.collection, or an ir_datasets id")
    parser.add_argument("--out", required=True, type=Path, help="the re-ranked TREC run to write")
    parser.add_argument("--depth", type=int, default=100, help="documents re-ranked per query (default 100)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--precision", default="32", choices=list(PRECISIONS))
    parser.add_argument("--max_length", type=int, default=512, help="tokens per (query, document) row")
    parser.add_argument("--max_query_length", type=int, default=None, help="cap on query tokens (default 64)")
    parser.add_argument("--passages", default="first", choices=["first", "maxp"], help="maxp: max over passages")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.depth < 1:
        parser.error(f"--depth must be positive; got {args.depth}")

    config = collection_config(args.collection)
    collection = Collection(config)
    run = top(read_run(args.run, queries=collection.queries), args.depth)
    documents = collection.documents
    unknown = sorted({doc for docs in run.values() for doc in docs if doc not in documents})
    if unknown:
        raise ValueError(f"{args.run}: {len(unknown)} document ids are not in collection {collection.name} "
                         f"(e.g. {', '.join(unknown[:5])}); is the run from another collection?")
    reranker = Reranker.from_pretrained(args.model, batch_size=args.batch_size, device=args.device,
                                        precision=args.precision, max_length=args.max_length, passages=args.passages,
                                        **({"max_query_length": args.max_query_length} if args.max_query_length else {}))
    candidates = {qid: CandidateTexts(docs, documents) for qid, docs in run.items()}
    reranked = reranker.rerank_many(collection.queries, candidates)
    write_run(reranked, args.out, tag="rerank")
    report: dict[str, dict[str, float]] = {}
    if config.ir_datasets or config.qrels:
        report = {"input": evaluate(run, collection.qrels, METRICS).mean,
                  "reranked": evaluate(reranked, collection.qrels, METRICS).mean}
        print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
