"""Pseudo-queries made from the collection itself: training queries that cost no judgments.

After MacAvaney, Yates, Hui and Frieder, *Content-Based Weak Supervision for Ad-Hoc Re-Ranking* (SIGIR 2019):
a document's title is a query to which the document itself is relevant, and the first stage's other candidates
for that query are its competitors (unjudged, label 0). A document without a usable title gives its first
sentence instead (cut at ``max_words`` words). With ``per_document`` above 1, a document also gives the next
sentences of its body, each a query of its own (``pseudo:<doc id>#2``, ``#3``, ...): more, and more varied, queries
for a stage that learns from a teacher's scores over their candidates.

With ``max_words: auto`` a pseudo-query is no longer than the longest of the queries the model will be asked
(``data.collection``'s, their words; :func:`sized_to`), within ``min_words`` and ``MAX_WORDS``: where the real queries
are a few words (NFCorpus: at most 18), the first 24 words of an abstract would teach the student a query of another
kind. Elsewhere (Cranfield, SciFact: a query of 24 words or more) it is 24.

With ``lengths: queries`` (the default recipe's; the evidence: docs/experiments/paragraph-spans-rows.md) the
pseudo-queries take the shape of paragraph queries where the collection's are paragraphs (a median above ``MAX_WORDS``
words; below, titles as above): a pseudo-query is a run of whole sentences of a document's body, from a seeded sentence
on, whose length in words is drawn from the queries' own lengths (the run of sentences closest to it, at most
``MAX_SPAN_WORDS``), so that the stage's queries follow the real ones' length distribution. A span is its document's
words verbatim, which no real query is, so a span's own document is not among its candidates
(:mod:`rerank.training.sources`, for teacher targets): the student learns how the teacher ranks the *other* documents
for a paragraph. ``lengths`` may also list the lengths to draw from.

The set is deterministic: documents are taken in a seeded order (``seed``) until ``count`` usable queries are
found. It never looks at judgments (only at documents), so it is the same for every fold. Trivial queries are
left out: fewer than ``min_words`` content words (words that are not English stop words), and texts that several
documents share (which document would be the relevant one?). The set is cached under
``$RERANK_CACHE/pseudo_queries`` by the documents' fingerprint and these settings.
"""

from __future__ import annotations

import logging
import random
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

from ..core.atomic import atomic_write
from ..core.cache import cache_path, intact, sealing
from ..core.checks import AUTO, check_range
from .collection import Documents

logger = logging.getLogger(__name__)

PREFIX = "pseudo:"
"""Pseudo-query ids are ``pseudo:<doc id>`` (a document's first), then ``pseudo:<doc id>#2``, ``#3``, ..."""
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=\w)\s*[.!?]\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
MAX_WORDS = 24
"""The most words ``max_words: auto`` gives a title-like pseudo-query, and
the median query length above which the queries are taken as paragraphs (spans)."""
QUERIES = "queries"
"""``pseudo.lengths: queries``: spans as long as the collection's queries, where those are paragraphs."""
MAX_SPAN_WORDS = 192
"""The most words of a span: about the 256 tokens that the teacher (a bi-encoder) reads of a query."""


@dataclass(frozen=True)
class PseudoQueryConfig:
    """How pseudo-queries are drawn.

    Attributes:
        count: usable pseudo-queries wanted (None: all that the documents give).
        seed: seeds the order in which documents are taken.
        min_words: content words (not stop words) a query needs.
        max_words: words a query keeps (of a title or a sentence); ``auto``: as many as the longest query of the
            collection the model is trained for, within ``min_words`` and ``MAX_WORDS`` (:func:`sized_to`).
        per_document: queries a document may give: its title (else its first sentence), then its body's next
            sentences in order; for spans, that many spans of its body.
        lengths: spans instead of titles: the word lengths that each span's length is drawn from; ``queries``:
            the collection's queries' lengths where they are paragraphs, else titles (resolved by :func:`sized_to`);
            empty: titles. A span keeps at most ``max_words`` words.
    """

    count: int | None = 1000
    seed: int = 42
    min_words: int = 3
    max_words: int | Literal["auto"] = MAX_WORDS
    per_document: int = 1
    lengths: tuple[int, ...] | Literal["queries"] = ()

    def __post_init__(self) -> None:
        if self.count is not None:  # null: all
            check_range("pseudo.count", self.count, 1)
        if self.max_words != AUTO and (isinstance(self.max_words, bool) or not isinstance(self.max_words, int)):
            raise ValueError(f"pseudo.max_words: a number of words, or auto; got {self.max_words!r}")
        if not 1 <= self.min_words <= (MAX_WORDS if self.max_words == AUTO else self.max_words):
            raise ValueError(f"pseudo: need 1 <= min_words <= max_words; got {self.min_words} and {self.max_words}")
        check_range("pseudo.per_document", self.per_document, 1)
        if self.lengths == QUERIES:
            return
        if isinstance(self.lengths, str):
            raise ValueError(f"pseudo.lengths: numbers of words, or {QUERIES}; got {self.lengths!r}")
        object.__setattr__(self, "lengths", tuple(self.lengths))  # a YAML list
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.lengths):
            raise ValueError(f"pseudo.lengths: numbers of words (>= 1), or {QUERIES}; got {list(self.lengths)!r}")

    @property
    def sized(self) -> bool:
        """Whether nothing is left to resolve from the collection's queries (no ``max_words: auto``, no ``lengths:
        queries``; :func:`sized_to`)."""
        return self.max_words != AUTO and self.lengths != QUERIES

    @property
    def spans(self) -> bool:
        """Whether the pseudo-queries are spans of the documents' bodies (else titles or first sentences)."""
        return bool(self.lengths) and self.lengths != QUERIES

    def describe(self) -> str:
        """What the pseudo-queries are, in a few words (for the run's plan)."""
        if not self.spans:
            return f"titles or first sentences of at most {self.max_words} words"
        ordered = sorted(self.lengths)
        return (f"spans of whole sentences whose lengths follow the queries' (median {ordered[len(ordered) // 2]} "
                f"words, at most {self.max_words}), their own document left out of their candidates")


@dataclass(frozen=True)
class PseudoQuery:
    """A pseudo-query and the document it was made from (its one relevant document)."""

    query_id: str
    text: str
    doc_id: str


def sized_to(config: PseudoQueryConfig, queries: Iterable[str]) -> PseudoQueryConfig:
    """``config`` with ``max_words: auto`` and ``lengths: queries`` resolved from ``queries`` (numbers are kept; see
    the module docstring): with ``lengths: queries`` and queries of a median above ``MAX_WORDS`` words, spans whose
    lengths are the queries' (within ``min_words`` and ``MAX_SPAN_WORDS``), at most ``MAX_SPAN_WORDS`` words; else
    titles, of at most the longest query's words (within ``min_words`` and ``MAX_WORDS``) for ``max_words: auto``."""
    if config.sized:
        return config
    lengths = sorted(len(text.split()) for text in queries)
    if config.lengths == QUERIES:
        if are_paragraphs(lengths):
            return replace(config, max_words=MAX_SPAN_WORDS,
                           lengths=tuple(min(MAX_SPAN_WORDS, max(config.min_words, n)) for n in lengths))
        config = replace(config, lengths=())
    if config.max_words != AUTO:
        return config
    longest = lengths[-1] if lengths else MAX_WORDS
    return replace(config, max_words=min(MAX_WORDS, max(config.min_words, longest)))


def are_paragraphs(word_counts: Sequence[int]) -> bool:
    """Whether queries of these lengths in words are paragraphs rather than titles: a median above ``MAX_WORDS``."""
    return bool(word_counts) and statistics.median(word_counts) > MAX_WORDS


def pseudo_queries(documents: Documents, config: PseudoQueryConfig) -> list[PseudoQuery]:
    """The pseudo-queries of ``documents`` (cached; see the module docstring); ``config`` resolved by
    :func:`sized_to`."""
    if not config.sized:
        raise TypeError("pseudo_queries: resolve max_words: auto and lengths: queries first (sized_to)")
    path = cache_path("pseudo_queries", documents.source(), documents.fingerprint(), asdict(config), suffix=".tsv")
    if intact(path, "pseudo-queries"):
        with path.open(encoding="utf-8") as handle:
            return [PseudoQuery(*line.rstrip("\n").split("\t")) for line in handle]
    queries = _draw(documents, config)
    with atomic_write(path, finish=sealing(path)) as handle:
        handle.writelines(f"{query.query_id}\t{query.text}\t{query.doc_id}\n" for query in queries)
    logger.info("%d pseudo-queries from %d documents (cached in %s)", len(queries), len(documents), path)
    return queries


def _draw(documents: Documents, config: PseudoQueryConfig) -> list[PseudoQuery]:
    from bm25s.stopwords import STOPWORDS_EN

    stopwords = set(STOPWORDS_EN)
    titles = dict(documents.iter_titles())
    order = sorted(titles)
    random.Random(config.seed).shuffle(order)
    owner: dict[str, PseudoQuery | None] = {}  # text -> its query, or None once several documents gave it
    make = _spans if config.spans else _query_texts
    texts = ((doc_id, rank, text) for doc_id in order  # lazily: documents are read only until count is reached
             for rank, text in enumerate(make(titles[doc_id], documents, doc_id, config, stopwords), start=1))
    usable = 0
    for doc_id, rank, text in texts:
        if config.count is not None and usable >= config.count:
            break
        if text in owner:
            usable -= owner[text] is not None
            owner[text] = None
        else:
            owner[text] = PseudoQuery(f"{PREFIX}{doc_id}" if rank == 1 else f"{PREFIX}{doc_id}#{rank}", text, doc_id)
            usable += 1
    return [query for query in owner.values() if query is not None]


def _query_texts(title: str, documents: Documents, doc_id: str, config: PseudoQueryConfig,
                 stopwords: set[str]) -> list[str]:
    """Up to ``per_document`` distinct usable texts: the title (else the first sentence), then the body's next
    sentences, each cut at ``max_words`` words."""
    body = documents.text(doc_id).removeprefix(title).strip()  # the text joins title and body
    sentences = _SENTENCE_END.split(body, maxsplit=config.per_document)[: config.per_document]
    texts: list[str] = []
    for text in (_cut(title, config), *(_cut(sentence, config) for sentence in sentences)):
        if _usable(text, config, stopwords) and text not in texts:
            texts.append(text)
    return texts[: config.per_document]


def _spans(title: str, documents: Documents, doc_id: str, config: PseudoQueryConfig,
           stopwords: set[str]) -> list[str]:
    """Up to ``per_document`` distinct usable spans of the document's body (its title when it has no body): for
    each, a length drawn from ``config.lengths`` and a first sentence with at least that many words from it on (the
    first when none has), both seeded by the document, then the run of whole sentences from there whose words come
    closest to that length (cut at ``max_words``)."""
    body = documents.text(doc_id).removeprefix(title).strip() or title
    sentences = [sentence.split() for sentence in _SENTENCE.split(body) if sentence.split()]
    draw = random.Random(f"{config.seed}/{doc_id}")
    texts: list[str] = []
    for _ in range(config.per_document):
        if not sentences:
            break
        target = draw.choice(config.lengths)
        left = [sum(map(len, sentences[i:])) for i in range(len(sentences))]  # words from each sentence on
        first = draw.choice([i for i, words in enumerate(left) if words >= target] or [0])
        words: list[str] = []
        for sentence in sentences[first:]:
            if words and abs(len(words) + len(sentence) - target) >= abs(len(words) - target):
                break
            words += sentence
        text = " ".join(words[: config.max_words])
        if _usable(text, config, stopwords) and text not in texts:
            texts.append(text)
    return texts


def _cut(text: str, config: PseudoQueryConfig) -> str:
    return " ".join(text.split()[: config.max_words]).strip(" .")


def _usable(text: str, config: PseudoQueryConfig, stopwords: set[str]) -> bool:
    content = {word for word in _WORD.findall(text.lower()) if word not in stopwords and not word.isdigit()}
    return len(content) >= config.min_words
