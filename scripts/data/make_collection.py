"""Local-file collections of Robust04's and MS MARCO's shapes, to run rerank's own commands at their real size.

Usage::

    python scripts/data/make_collection.py robust04 --out collections/robust04-shaped
    python scripts/data/make_collection.py msmarco --out collections/msmarco-shaped
    python scripts/data/make_collection.py robust04 --out collections/r04-small --scale 0.01   # 1 % of the documents

Each folder holds the files a user's own collection has (docs.jsonl, queries, TREC qrels; ``collection.yaml`` and
``pretrain.yaml`` to stack on a config) and ``shape.json``: the counts and length statistics measured on what was
written. The text is deterministic for a seed; it is not language: words are made-up syllable strings whose
frequencies follow a Zipf-Mandelbrot law (``p(r) ~ 1 / (r + 2.7)``, the shape of word frequencies in news text), so
BM25's statistics behave as on real text, and relevant documents carry their query's terms, more of them the
higher the grade, so that BM25 and a model have something to find without finding everything.

**robust04** (TREC Disks 4 and 5 without the Congressional Record; Robust 2004 topics and qrels):

- 528,155 documents with a title and a body whose length in words is log-normal with a median of 380 and a 99th
  percentile of about 2,700, plus a Pareto tail up to 30,000 words (the real collection: 528,155 documents,
  about 296 indexed terms per document after stop words are removed, that is about 500 words, a few hundred at the
  median and some very long Federal Register documents; Ferro et al., IRJ 2018, Table 2);
- 250 topics with Robust04's ids (301-450, 601-700), each with a title (2 to 4 words), a description (a sentence)
  and a narrative, as a TREC topic file; as in the real qrels, 672 has no judgment, so 249 are judged;
- about 311,000 graded judgments (0, 1, 2), on average 1,250 per topic of which about 70 relevant (log-normal
  across topics, some with 3), as the real qrels (311,410 judgments, 17,412 relevant);
- the standard 5 folds of Huston and Croft (2014), as ``ir_datasets`` ships them, in ``collection.yaml``.

**msmarco** (MS MARCO passage ranking):

- 8,841,823 passages of about 56 words (log-normal, median 52), no titles;
- 808,731 training queries of about 6 words, each with one relevant passage (6 % with two), and a dev set of 6,980
  queries (``queries.dev.tsv``, ``qrels.dev.txt``); ``pretrain.yaml`` points the stage of
  rerank/configs/recipes/transfer/msmarco-pretrain.yaml at them.

What the tests use are the same shapes at small sizes (``--scale``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
SYLLABLES = [c + v for c in CONSONANTS for v in VOWELS]  # 70 syllables; a word is 1 to 4 of them
CHUNK = 8192
"""Documents generated and written at a time (memory stays flat whatever the collection's size)."""


@dataclass(frozen=True)
class Shape:
    """A collection's shape.

    Attributes:
        name: ``robust04`` or ``msmarco``.
        documents: how many documents.
        vocabulary: distinct words.
        median_words: median document length in words (log-normal).
        sigma: the log-normal's sigma.
        tail: share of documents drawn from a Pareto tail instead (very long ones), up to ``longest`` words.
        longest: the longest document's length in words.
        title_words: median title length in words (0: no titles).
        queries: topics (robust04) or training queries (msmarco).
        dev_queries: a dev set's queries (msmarco).
        judged: mean judgments per topic (robust04).
        relevant: mean relevant documents per topic (robust04; at least 3).
    """

    name: str
    documents: int
    vocabulary: int
    median_words: float
    sigma: float
    tail: float
    longest: int
    title_words: int
    queries: int
    dev_queries: int = 0
    judged: float = 0.0
    relevant: float = 0.0

    def scaled(self, scale: float) -> Shape:
        """This shape with ``scale`` times the documents and queries (Robust04's topics stay 250 down to a
        scale of 0.2, then shrink) and the judgments per topic in proportion to the documents."""
        if not 0 < scale <= 1:
            raise ValueError(f"--scale must lie in (0, 1]; got {scale}")
        topics = self.queries if self.name == "robust04" and scale >= 0.2 else max(10, round(self.queries * scale))
        return dataclasses.replace(
            self, documents=max(100, round(self.documents * scale)), queries=topics,
            dev_queries=max(10, round(self.dev_queries * scale)) if self.dev_queries else 0,
            judged=self.judged * min(1.0, scale * 5),
            relevant=max(3.0, self.relevant * min(1.0, scale * 5)) if self.relevant else 0.0)


ROBUST04 = Shape(name="robust04", documents=528_155, vocabulary=400_000, median_words=380, sigma=0.8, tail=0.002,
                 longest=30_000, title_words=8, queries=250, judged=1_250.6, relevant=69.9)
MSMARCO = Shape(name="msmarco", documents=8_841_823, vocabulary=600_000, median_words=52, sigma=0.4, tail=0.0,
                longest=362, title_words=0, queries=808_731, dev_queries=6_980)
SHAPES = {"robust04": ROBUST04, "msmarco": MSMARCO}
ROBUST04_TOPIC_IDS = [str(i) for i in (*range(301, 451), *range(601, 701))]
UNJUDGED = {"672"}
"""Robust04's topic 672 has no relevant document and no judgment in the qrels: it is written, unjudged, as there."""


def words(count: int) -> np.ndarray:
    """``count`` distinct made-up words, shortest first (frequent words are short, as in language)."""
    out: list[str] = []
    size = 0
    while len(out) < count:
        size += 1
        out += ("".join(syllables) for syllables in itertools.islice(
            itertools.product(SYLLABLES, repeat=size), count - len(out)))
    return np.array(out, dtype=object)


class Text:
    """Draws word ids from the Zipf-Mandelbrot law over a vocabulary and turns ids into text."""

    def __init__(self, vocabulary: int) -> None:
        weights = 1.0 / (np.arange(vocabulary) + 2.7)
        self.cumulative = np.cumsum(weights / weights.sum())
        self.words = words(vocabulary)

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return np.minimum(np.searchsorted(self.cumulative, rng.random(count)), len(self.words) - 1)

    def join(self, ids: np.ndarray) -> str:
        return " ".join(self.words[ids])


def lengths(shape: Shape, rng: np.random.Generator, count: int) -> np.ndarray:
    """Document lengths in words: log-normal, with a share ``tail`` from a Pareto tail up to ``longest``."""
    body = rng.lognormal(np.log(shape.median_words), shape.sigma, count)
    tail = rng.random(count) < shape.tail
    body[tail] = shape.median_words * 8 * (1 + rng.pareto(1.2, tail.sum()))
    return np.clip(np.round(body), 1, shape.longest).astype(np.int64)


@dataclass
class Topics:
    """Each query's terms (mid-frequency word ids: rare enough to find documents, common enough to repeat)."""

    terms: np.ndarray
    """[queries, 10]: the first ``title`` of each row make the title."""
    title: np.ndarray
    """[queries]: title length (2 to 4)."""


def topics(shape: Shape, rng: np.random.Generator) -> Topics:
    terms = rng.integers(300, min(shape.vocabulary, 40_000), size=(shape.queries, 10))
    return Topics(terms=terms, title=rng.choice([2, 3, 3, 3, 4], size=shape.queries))


@dataclass(frozen=True)
class Mention:
    """How a judged document of a grade mentions its topic's terms.

    Attributes:
        density: topic terms put in per word of the body (at least one).
        title_weight: how much likelier a title term is than a description term.
        mismatch: share of such documents that use the description's terms only (none of the title's): relevant
            documents that a title query does not match, as real ones written in other words.
    """

    density: float
    title_weight: float
    mismatch: float


MENTIONS = {2: Mention(0.025, 3.0, 0.0), 1: Mention(0.015, 3.0, 0.2), 0: Mention(0.006, 6.0, 0.0)}
"""By grade; grade 0 are the judged non-relevant documents: near misses that use the title's words (a pooled
system retrieved them) about something else."""


def robust04_judgments(shape: Shape, topic_ids: list[str], rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """(topic, document, grade) for every judgment: per topic (but those in :data:`UNJUDGED`), a log-normal number
    of relevant documents (at least 3; 15 % of them highly relevant, grade 2) and judged non-relevant ones, drawn
    from all documents."""
    relevant = np.maximum(3, np.round(rng.lognormal(np.log(shape.relevant) - 0.5, 1.0, shape.queries)))
    relevant = np.minimum(relevant, shape.documents // 4).astype(np.int64)
    judged = np.maximum(relevant + 1, np.round(rng.normal(shape.judged, shape.judged * 0.3, shape.queries)))
    judged = np.minimum(judged, shape.documents // 2).astype(np.int64)
    judgments = []
    for topic in (topic for topic, qid in enumerate(topic_ids) if qid not in UNJUDGED):
        docs = rng.choice(shape.documents, size=judged[topic], replace=False)
        grades = np.zeros(judged[topic], dtype=np.int64)
        grades[: relevant[topic]] = 1 + (rng.random(relevant[topic]) < 0.15)
        judgments += zip([topic] * len(docs), docs.tolist(), grades.tolist(), strict=True)
    return judgments


def _inject(ids: np.ndarray, topic_terms: np.ndarray, title_length: int, grade: int,
            rng: np.random.Generator) -> None:
    """Put a topic's terms at random places of ``ids`` (in place), as a document of ``grade`` mentions them."""
    mention = MENTIONS[grade]
    count = rng.poisson(mention.density * len(ids)) + 1
    weights = np.where(np.arange(len(topic_terms)) < title_length, mention.title_weight, 1.0)
    if rng.random() < mention.mismatch:
        weights[:title_length] = 0.0
    ids[rng.integers(0, len(ids), count)] = rng.choice(topic_terms, size=count, p=weights / weights.sum())


def documents(shape: Shape, text: Text, rng: np.random.Generator, judgments: dict[int, list[tuple[int, int]]],
              query_terms: Topics | None) -> Iterator[tuple[str, str, np.ndarray]]:
    """(doc id, title, body ids) of every document, in chunks; judged documents carry their topics' terms."""
    for start in range(0, shape.documents, CHUNK):
        count = min(CHUNK, shape.documents - start)
        body_lengths = lengths(shape, rng, count)
        ids = text.draw(rng, int(body_lengths.sum()))
        offsets = np.concatenate([[0], np.cumsum(body_lengths)])
        title_lengths = rng.poisson(shape.title_words, count) + 1 if shape.title_words else np.zeros(count, int)
        title_ids = text.draw(rng, int(title_lengths.sum()))
        title_offsets = np.concatenate([[0], np.cumsum(title_lengths)])
        for i in range(count):
            body = ids[offsets[i]: offsets[i + 1]]
            title = title_ids[title_offsets[i]: title_offsets[i + 1]]
            for topic, grade in judgments.get(start + i, ()):
                _inject(body, query_terms.terms[topic], query_terms.title[topic], grade, rng)
                if grade and len(title) and rng.random() < 0.3:
                    title[rng.integers(len(title))] = query_terms.terms[topic][rng.integers(query_terms.title[topic])]
            yield doc_id(shape, start + i), text.join(title) if len(title) else "", body


def doc_id(shape: Shape, index: int) -> str:
    return str(index) if shape.name == "msmarco" else f"R04-{index:06d}"


def write_robust04(shape: Shape, out: Path, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    text = Text(shape.vocabulary)
    terms = topics(shape, rng)
    topic_ids = ROBUST04_TOPIC_IDS[: shape.queries] if shape.queries <= len(ROBUST04_TOPIC_IDS) else [
        str(i) for i in range(1, shape.queries + 1)]
    judgments = robust04_judgments(shape, topic_ids, rng)
    by_document: dict[int, list[tuple[int, int]]] = {}
    for topic, doc, grade in judgments:
        by_document.setdefault(doc, []).append((topic, grade))
    stats = _write_documents(out / "docs.jsonl", documents(shape, text, rng, by_document, terms), text,
                             shape.documents)
    with (out / "topics.txt").open("w", encoding="utf-8") as handle:
        for topic, qid in enumerate(topic_ids):
            title = text.join(terms.terms[topic][: terms.title[topic]])
            description = np.concatenate([text.draw(rng, 4), terms.terms[topic][:6], text.draw(rng, 6)])
            narrative = np.concatenate([text.draw(rng, 10), terms.terms[topic][3:], text.draw(rng, 10)])
            handle.write(f"<top>\n<num> Number: {qid}\n<title> {title}\n<desc> Description:\n"
                         f"{text.join(description)}\n<narr> Narrative:\n{text.join(narrative)}\n</top>\n\n")
    with (out / "qrels.txt").open("w", encoding="utf-8") as handle:
        for topic, doc, grade in sorted(judgments):
            handle.write(f"{topic_ids[topic]} 0 {doc_id(shape, doc)} {grade}\n")
    folds = _robust04_folds(topic_ids)
    _write_yaml(out / "collection.yaml", {"data": {
        "collection": {"docs": str(out / "docs.jsonl"), "queries": str(out / "topics.txt"),
                       "qrels": str(out / "qrels.txt"), "query_field": "title"},
        "folds": {"scheme": "explicit", "lists": folds}}})
    relevant = list(Counter(topic for topic, _, grade in judgments if grade).values())
    return {**stats, "topics": shape.queries, "judged_topics": len(relevant), "judgments": len(judgments),
            "relevant_per_topic": {"mean": float(np.mean(relevant)), "min": int(min(relevant)),
                                   "max": int(max(relevant))},
            "folds": [len(fold) for fold in folds]}


def _robust04_folds(topic_ids: list[str]) -> list[list[str]]:
    """Huston and Croft's 5 folds of the topics written (all of them at full size); other ids: 5 by position."""
    from ir_datasets.datasets.disks45 import ROBUST04_FOLDS

    written = set(topic_ids)
    folds = [sorted(written & set(ROBUST04_FOLDS[f"fold{k}"]), key=int) for k in range(1, 6)]
    if sum(map(len, folds)) == len(topic_ids) and all(len(fold) >= 2 for fold in folds):
        return folds
    return [topic_ids[k::5] for k in range(5)]


GROUP = 10
"""MS MARCO's passages come from the top results of a web search for their query, about 10 per query, all about the
same subject and one judged relevant: consecutive groups of ``GROUP`` passages share a subject's terms here."""


def write_msmarco(shape: Shape, out: Path, seed: int) -> dict[str, object]:
    """Passages in groups of :data:`GROUP` that share 4 subject terms (each passage has 3 or more of them), then
    each query made from its relevant passage: 2 of the subject's terms that the passage has, one of the passage's
    own mid-frequency words (30 % of the queries; what sets it apart from its group), and one or two frequent words
    (``what``, ``is``-like), as a user's question would; a quarter of the queries use a word of their own instead of a
    subject term (another wording). About 6 % of the training queries also get a second relevant passage, the next
    one, which is given the query's words."""
    rng = np.random.default_rng(seed)
    text = Text(shape.vocabulary)
    queries = shape.queries + shape.dev_queries
    targets = np.sort(rng.choice(shape.documents, size=queries, replace=False))
    owner = dict(zip(targets.tolist(), rng.permutation(queries).tolist(), strict=True))
    twins = {doc + 1: query for doc, query in owner.items()  # the next passage, when it is nobody's target
             if query < shape.queries and doc + 1 < shape.documents and doc + 1 not in owner and rng.random() < 0.06}
    subjects = rng.integers(300, min(shape.vocabulary, 8_000), size=(-(-shape.documents // GROUP), 4))
    made: dict[int, np.ndarray] = {}

    def passages() -> Iterator[tuple[str, str, np.ndarray]]:
        for doc, title, body in documents(shape, text, rng, {}, None):
            index = int(doc)
            subject = subjects[index // GROUP]
            count = min(len(body), 3 + rng.poisson(1.0))
            body[rng.choice(len(body), count, replace=False)] = rng.choice(subject, count)
            if index in owner:
                made[owner[index]] = _query_from(body, subject, shape.vocabulary, rng)
            elif index in twins:  # a second relevant passage: its query's words at random places
                terms = made[twins[index]]
                body[rng.integers(0, len(body), len(terms))] = terms
            yield doc, title, body

    stats = _write_documents(out / "docs.jsonl", passages(), text, shape.documents)
    stats["relevant_per_query"] = 1 + len(twins) / shape.queries
    for split, ids in (("train", range(shape.queries)), ("dev", range(shape.queries, queries))):
        with (out / f"queries.{split}.tsv").open("w", encoding="utf-8") as handle:
            handle.writelines(f"q{query}\t{text.join(made[query])}\n" for query in ids)
    relevant: dict[int, list[int]] = {}
    for doc, query in (*owner.items(), *twins.items()):
        relevant.setdefault(query, []).append(doc)
    with (out / "qrels.train.txt").open("w", encoding="utf-8") as train, \
            (out / "qrels.dev.txt").open("w", encoding="utf-8") as dev:
        for query in range(queries):
            handle = train if query < shape.queries else dev
            handle.writelines(f"q{query} 0 {doc_id(shape, doc)} 1\n" for doc in sorted(relevant[query]))
    _write_yaml(out / "pretrain.yaml", {"pretrain": {"train": [{
        "name": "msmarco-shaped",
        "collection": {"docs": str(out / "docs.jsonl"), "queries": str(out / "queries.train.tsv"),
                       "qrels": str(out / "qrels.train.txt")},
        "first_stage": {"backend": "pyserini", "retrieval_depth": 100},
        "queries": "all", "targets": "qrels", "max_queries": 50000}]}})
    _write_yaml(out / "collection.yaml", {"data": {"collection": {"docs": str(out / "docs.jsonl"), "queries": str(
        out / "queries.dev.tsv"), "qrels": str(out / "qrels.dev.txt")}}})
    return {**stats, "train_queries": shape.queries, "dev_queries": shape.dev_queries}


def _query_from(body: np.ndarray, subject: np.ndarray, vocabulary: int, rng: np.random.Generator) -> np.ndarray:
    """A query for ``body`` (see :func:`write_msmarco`): its subject terms are among those ``body`` has, as its
    group's other passages have them."""
    present = np.unique(body[np.isin(body, subject)])
    terms = rng.choice(present, min(2, len(present)), replace=False)
    if len(terms) > 1 and rng.random() < 0.25:
        terms[1] = rng.integers(300, min(vocabulary, 8_000))
    own = body[(body >= 300) & ~np.isin(body, subject)]
    if len(own) and rng.random() < 0.3:
        terms = np.append(terms, rng.choice(own))
    return np.concatenate([rng.integers(0, 60, size=int(rng.integers(1, 3))), terms])


def _write_documents(path: Path, docs: Iterator[tuple[str, str, np.ndarray]], text: Text,
                     total: int) -> dict[str, object]:
    """Writes docs.jsonl (with a progress bar); returns the counts and length statistics of what was written."""
    from tqdm import tqdm

    words_ = np.zeros(total, dtype=np.int64)
    with path.open("w", encoding="utf-8") as handle:
        for i, (doc, title, body) in enumerate(tqdm(docs, total=total, desc=path.name, unit=" docs", mininterval=5)):
            record = {"doc_id": doc, "title": title, "text": text.join(body)} if title else {
                "doc_id": doc, "text": text.join(body)}
            handle.write(json.dumps(record) + "\n")
            words_[i] = len(body)
    return {"documents": total, "bytes": path.stat().st_size,
            "words": {"mean": float(words_.mean()), "median": float(np.median(words_)),
                      "p99": float(np.percentile(words_, 99)), "max": int(words_.max())}}


def _write_yaml(path: Path, config: dict[str, object]) -> None:
    import yaml

    path.write_text(f"# written by scripts/data/make_collection.py; stack it: --config {path}\n"
                    + yaml.safe_dump(config, sort_keys=False, width=120))


def make(shape: Shape, out: Path, seed: int = 42) -> dict[str, object]:
    """Writes a collection of ``shape`` into ``out`` (created; absolute paths in its YAML files) and returns what
    ``shape.json`` says."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    stats = (write_robust04 if shape.name == "robust04" else write_msmarco)(shape, out, seed)
    summary = {"shape": dataclasses.asdict(shape), "seed": seed, **stats}
    (out / "shape.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (created)")
    parser.add_argument("--scale", type=float, default=1.0, help="a fraction of the documents and queries")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    try:
        shape = SHAPES[args.shape].scaled(args.scale)
    except ValueError as error:
        parser.error(str(error))
    print(json.dumps(make(shape, args.out, args.seed), indent=2))


if __name__ == "__main__":
    sys.exit(main())
