"""Collections of other shapes, made from the real ones in ``../shared/data``, to try a recipe on texts unlike those
it was chosen on (docs/experiments/shapes.md): each is written as local files (``docs.jsonl``, ``queries.tsv``,
``qrels.txt``) to give as ``data.collection``, never into the repository.

- ``long-queries``: paragraph-long natural-language queries and documents of a few hundred words, from SciFact: for
  ``--queries`` abstracts of at least six sentences (a seeded sample), the query is the first three sentences and the
  document keeps the rest; that document is the query's one relevant document (known-item search with the words of
  the query's own sentences gone from it);
- ``short-documents``: Cranfield with each document reduced to its title (a line: median 9 words), its queries
  (sentences of 15 words) and graded qrels unchanged;
- ``short-abstracts``: SciFact's test claims (median 12 words) and qrels, each abstract cut to its first 40 words;
- ``query-by-document``: paragraph-long queries with real graded judgments, as in prior-art search, from Cranfield:
  each of the 129 documents that Cranfield's queries were written from (its ``source_docs.tsv``) is a query (its
  title and abstract), judged by the union of the judgments of the queries written from it (the highest gain); the
  129 are taken out of the documents, so that no query is a document of the collection.

    python scripts/data/shape_collections.py --shared ../shared/data --out runs/shapes
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
from collections.abc import Iterator
from pathlib import Path

SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
SHAPES = ("long-queries", "short-documents", "short-abstracts", "query-by-document")


def documents(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as handle:
        yield from (json.loads(line) for line in handle if line.strip())


def long_queries(shared: Path, count: int, seed: int) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    docs = list(documents(shared / "scifact" / "docs.jsonl"))
    split = {doc["doc_id"]: SENTENCE.split(doc["text"]) for doc in docs}
    eligible = sorted(doc_id for doc_id, sentences in split.items() if len(sentences) >= 6)
    chosen = set(random.Random(seed).sample(eligible, min(count, len(eligible))))
    queries, qrels, kept = {}, {}, []
    for doc in docs:
        if doc["doc_id"] not in chosen:
            kept.append(doc)
            continue
        sentences = split[doc["doc_id"]]
        queries[f"q{doc['doc_id']}"] = " ".join(sentences[:3])
        qrels[f"q{doc['doc_id']}"] = {doc["doc_id"]: 1}
        kept.append({**doc, "text": " ".join(sentences[3:])})
    return kept, queries, qrels


def read_queries(path: Path) -> dict[str, str]:
    return dict(line.rstrip("\n").split("\t", 1) for line in path.open(encoding="utf-8") if line.strip())


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.open(encoding="utf-8"):
        if line.strip():
            qid, _, doc_id, relevance = line.split()
            qrels.setdefault(qid, {})[doc_id] = int(relevance)
    return qrels


def short_documents(shared: Path) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    docs = [{"doc_id": doc["doc_id"], "title": "", "text": doc["title"].rstrip(" .")}
            for doc in documents(shared / "cranfield" / "docs.jsonl")]
    return docs, read_queries(shared / "cranfield" / "queries.tsv"), read_qrels(shared / "cranfield" / "qrels.txt")


def short_abstracts(shared: Path, words: int = 40) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    docs = [{"doc_id": doc["doc_id"], "title": "", "text": " ".join(doc["text"].split()[:words])}
            for doc in documents(shared / "scifact" / "docs.jsonl")]
    return (docs, read_queries(shared / "scifact" / "queries.test.tsv"),
            read_qrels(shared / "scifact" / "qrels.test.txt"))


def query_by_document(shared: Path) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    cranfield = shared / "cranfield"
    docs = {doc["doc_id"]: doc for doc in documents(cranfield / "docs.jsonl")}
    sources = dict(line.split() for line in (cranfield / "source_docs.tsv").read_text().splitlines()[1:] if line)
    judged = read_qrels(cranfield / "qrels.txt")
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for qid, source in sorted(sources.items(), key=lambda item: int(item[0])):
        query = f"d{source}"
        queries.setdefault(query, " ".join(docs[source]["text"].split()))  # the abstract opens with the title
        for doc, gain in judged.get(qid, {}).items():
            if gain > 0 and doc not in sources.values():
                qrels.setdefault(query, {})[doc] = max(gain, qrels.get(query, {}).get(doc, 0))
    kept = [doc for doc_id, doc in docs.items() if doc_id not in set(sources.values())]
    return kept, {qid: text for qid, text in queries.items() if qid in qrels}, qrels


def write(folder: Path, docs: list[dict], queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict:
    """The three files, and the shape's figures (median words a query and a document, counts)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "docs.jsonl").open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(doc) + "\n" for doc in docs if doc["text"].strip())
    (folder / "queries.tsv").write_text("".join(f"{qid}\t{text}\n" for qid, text in queries.items()), encoding="utf-8")
    (folder / "qrels.txt").write_text("".join(f"{qid} 0 {doc} {rel}\n" for qid, judged in qrels.items()
                                              for doc, rel in judged.items()), encoding="utf-8")
    return {"documents": len(docs), "queries": len(queries), "judged queries": sum(qid in qrels for qid in queries),
            "median query words": statistics.median(len(text.split()) for text in queries.values()),
            "median document words": statistics.median(len(f"{doc['title']} {doc['text']}".split()) for doc in docs)}


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data")
    parser.add_argument("--out", type=Path, default=Path("runs/shapes"))
    parser.add_argument("--queries", type=int, default=300, help="long-queries: how many")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    args = parser.parse_args(argv)
    makers = {"long-queries": lambda: long_queries(args.shared, args.queries, args.seed),
              "short-documents": lambda: short_documents(args.shared),
              "short-abstracts": lambda: short_abstracts(args.shared),
              "query-by-document": lambda: query_by_document(args.shared)}
    figures = {shape: write(args.out / shape, *makers[shape]()) for shape in args.shapes}
    for shape, values in figures.items():
        print(shape, json.dumps(values))
    return figures


if __name__ == "__main__":
    main()
