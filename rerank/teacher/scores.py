"""Teacher scores: soft targets over every candidate, from a run with scores or a bi-encoder.

A training source with ``targets: teacher`` (or ``both``) learns from a teacher's scores over its candidates
(:mod:`rerank.losses.distill_listnet`, ``distill_ranknet``, ``margin_mse``)::

    teacher: {bi_encoder: sentence-transformers/all-MiniLM-L6-v2}   # score the candidates now (cached)
    teacher: {run: runs/big-cross-encoder/runs/reranked.run}        # or any TREC run with scores

A **bi-encoder** embeds queries and documents separately and scores a pair by the cosine of the two
embeddings, as it was trained to (``all-MiniLM-L6-v2``: mean pooling, normalised). Used zero-shot it is a
re-ranker in its own right (on Cranfield it beats BM25: ``docs/experiments/results.md``). Its scores are cached under
``$RERANK_CACHE/teacher`` by model, length and candidates, and its document embeddings under
``$RERANK_CACHE/embeddings``, so re-runs, other sources of the same documents and cross-validation folds pay once.

A **run** can come from anything that ranks: a bigger cross-encoder (``rerank predict``), an LLM ranking, a
``rerank teacher`` run. Every query of the candidates must be in it; a candidate it does not score (it
kept fewer documents) gets the lowest score the teacher gave that query, i.e. is taken as ranked below all it
kept.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import save

from ..config.teacher import TeacherConfig
from ..core.atomic import atomic_write
from ..core.cache import cache_path, file_digest, intact, sealing
from ..data.documents import Documents
from ..data.trec import Run, read_run, write_run
from ..evaluation.fusion import interpolate, standardise
from ..model.scorer import CandidateTexts, PairScorer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

DEFAULT_BI_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
COSINE_DECIMALS = 6
"""The decimals a bi-encoder's cosines are rounded to, in a fit and in the deployed ranker alike: the float noise
below them depends on how texts were batched and is not part of the teacher."""


@dataclass(frozen=True)
class TeacherRuns:
    """A teacher's scores of one split's candidates, for fusion and for reports.

    Attributes:
        config: the teacher.
        scores: its scores as configured (mixed with the first stage when ``first_stage_weight`` > 0).
        bi_encoder: its bi-encoder's scores alone, when ``scores`` mixes them with anything (else None).
    """

    config: TeacherConfig
    scores: Run
    bi_encoder: Run | None = None

    @classmethod
    def of(cls, config: TeacherConfig, candidates: Mapping[str, Mapping[str, float]], queries: Mapping[str, str],
           documents: Documents) -> TeacherRuns:
        """The teacher's runs over ``candidates`` (:func:`teacher_scores`), its bi-encoder's alone beside them."""
        scores = teacher_scores(config, candidates, queries, documents)
        mixed = config.bi_encoder is not None and (config.first_stage_weight > 0 or config.student is not None)
        alone = dataclasses.replace(config, first_stage_weight=0.0, student=None)
        return cls(config, scores, teacher_scores(alone, candidates, queries, documents) if mixed else None)


def teacher_scores(config: TeacherConfig, candidates: Mapping[str, Mapping[str, float]],
                   queries: Mapping[str, str], documents: Documents) -> Run:
    """The teacher's score of every candidate of ``candidates`` (``{query id: {doc id: first-stage score}}``).

    Raises:
        ValueError: the teacher run lacks a query of the candidates (with the file and examples).
    """
    scores = _from_run(config.run, candidates) if config.run is not None else _bi_encoder_run(config, candidates,
                                                                                               queries, documents)
    scores = blend(scores, candidates, config.first_stage_weight)
    if config.student is None:
        return scores
    return blend(scores, _student_run(config, candidates, queries, documents), config.student_weight)


def blend(teacher: Run, other: Mapping[str, Mapping[str, float]], weight: float) -> Run:
    """``(1 - weight) z(teacher) + weight z(other)`` for each query (``other``: the first stage, a student),
    standardised again and mapped to the teacher's own mean and spread for that query, so that a distillation
    temperature set for the teacher still fits (``teacher`` unchanged when ``weight`` is 0)."""
    if weight == 0:
        return teacher
    mixed: Run = {}
    for qid, scores in interpolate(teacher, other, 1 - weight).items():
        values = list(teacher[qid].values())
        mean, spread = statistics.fmean(values), statistics.pstdev(values)
        mixed[qid] = {doc: mean + spread * z for doc, z in standardise(scores).items()}
    return mixed


def _bi_encoder_run(config: TeacherConfig, candidates: Mapping[str, Mapping[str, float]],
                    queries: Mapping[str, str], documents: Documents) -> Run:
    key = (model_key(config.bi_encoder), config.max_length, documents.source(), documents.fingerprint(),
           sorted((qid, queries[qid], sorted(docs)) for qid, docs in candidates.items()))
    path = cache_path("teacher", *key, suffix=".trec")
    if intact(path, "teacher scores"):
        logger.info("teacher scores from the cache: %s", path)
        return read_run(path)
    scores = bi_encoder_scores(candidates, queries, documents, config.bi_encoder, config.max_length)
    write_run(scores, path, tag=f"bi-encoder-{config.bi_encoder.rsplit('/', 1)[-1]}", finish=sealing(path))
    return scores  # the file holds them exactly (rerank.data.trec), so a cached run gives the same targets


def _student_run(config: TeacherConfig, candidates: Mapping[str, Mapping[str, float]],
                 queries: Mapping[str, str], documents: Documents) -> Run:
    student = Path(config.student)
    weights = student / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"teacher.student {student}: no model.safetensors there; give a folder that rerank "
                                "exported (a run's model/)")
    key = (file_digest(weights), file_digest(student / "config.json"), config.student_precision,
           documents.source(), documents.fingerprint(),
           sorted((qid, queries[qid], sorted(docs)) for qid, docs in candidates.items()))
    path = cache_path("teacher", "student", *key, suffix=".trec")
    if not intact(path, "a student's scores"):
        reranker = PairScorer.from_pretrained(str(student), precision=config.student_precision)
        texts = {qid: CandidateTexts(docs, documents) for qid, docs in candidates.items()}
        scores = reranker.rerank_many(queries, texts, progress=f"student {student.name} scores the candidates")
        write_run(scores, path, tag=f"student-{student.name}", finish=sealing(path))
    else:
        logger.info("student scores from the cache: %s", path)
    return read_run(path)


def _from_run(path: str, candidates: Mapping[str, Mapping[str, float]]) -> Run:
    teacher = read_run(path)
    missing = sorted(set(candidates) - set(teacher))
    if missing:
        raise ValueError(f"teacher.run {path}: {len(missing)} of {len(candidates)} queries of the candidates are not "
                         f"in it (e.g. {', '.join(missing[:5])}); a teacher must score every query it teaches")
    scores: Run = {}
    filled = 0
    for qid, docs in candidates.items():
        known = teacher[qid]
        floor = min(known.values())
        scores[qid] = {doc: known.get(doc, floor) for doc in docs}
        filled += sum(doc not in known for doc in docs)
    if filled:
        logger.warning("teacher.run %s does not score %d candidates; they get their query's lowest teacher score",
                       path, filled)
    return scores


def bi_encoder_scores(run: Mapping[str, Mapping[str, float]], queries: Mapping[str, str], documents: Documents,
                      model_name: str = DEFAULT_BI_ENCODER, max_length: int = 256, batch_size: int = 64,
                      device: str | None = None) -> Run:
    """The cosine similarity of each (query, candidate) pair of ``run`` under the bi-encoder ``model_name``
    (:func:`bi_encoder_embeddings`), rounded to :data:`COSINE_DECIMALS` as the deployed ranker's are
    (:func:`rerank.ranker.memo.cosines_of_texts`).

    Raises:
        OSError: the model is neither a local folder nor in the Hugging Face cache, with where to look.
    """
    scores = cosines(*bi_encoder_embeddings(run, queries, documents, model_name, max_length, batch_size, device), run)
    return {qid: {doc: round(score, COSINE_DECIMALS) for doc, score in docs.items()} for qid, docs in scores.items()}


def cosines(by_query: Mapping[str, torch.Tensor], by_doc: Mapping[str, torch.Tensor],
            run: Mapping[str, Mapping[str, float]]) -> Run:
    """``q . d`` for each (query, candidate) pair of ``run``: the cosine, for normalised embeddings."""
    return {qid: {doc: float(by_query[qid] @ by_doc[doc]) for doc in docs} for qid, docs in run.items()}


def bi_encoder_embeddings(run: Mapping[str, Mapping[str, float]], queries: Mapping[str, str], documents: Documents,
                          model_name: str = DEFAULT_BI_ENCODER, max_length: int = 256, batch_size: int = 64,
                          device: str | None = None) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The normalised embeddings of the queries of ``run`` and of their candidates: ``(by query, by document)``.

    Documents are embedded once (texts cut at ``max_length`` tokens) and their embeddings kept in a cache under
    ``$RERANK_CACHE/embeddings``, shared by every run of the same documents; queries are embedded each time.

    Raises:
        OSError: the model is neither a local folder nor in the Hugging Face cache, with where to look.
    """
    model = load_bi_encoder(model_name, max_length, device)

    def encode(texts: list[str]) -> torch.Tensor:
        return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_tensor=True,
                            show_progress_bar=len(texts) > batch_size).cpu()

    by_doc = _document_embeddings(sorted({doc for docs in run.values() for doc in docs}), documents, encode,
                                  (model_key(model_name), max_length))
    query_ids = sorted(run)
    return dict(zip(query_ids, encode([queries[qid] for qid in query_ids]))), by_doc


def load_bi_encoder(name: str, max_length: int, device: str | None = None) -> SentenceTransformer:
    """The sentence-transformers bi-encoder ``name`` (a folder, or a hub id in the Hugging Face cache), reading rows of
    ``max_length`` tokens.

    Raises:
        OSError: it is neither a local folder nor in the Hugging Face cache, with where to look (a name that is a
            path is not looked up on the hub).
    """
    from sentence_transformers import SentenceTransformer

    if looks_like_a_path(name) and not Path(name).is_dir():
        raise FileNotFoundError(f"bi-encoder {name}: no such folder")
    try:
        model = SentenceTransformer(name, device=device or "cpu")
    except OSError as error:
        raise OSError(f"bi-encoder {name!r} not found: give a local folder, or a hub id present in the Hugging "
                      f"Face cache (HF_HOME; HF_HUB_OFFLINE=1 when offline). Cause: {error}") from None
    model.max_seq_length = max_length
    return model


def looks_like_a_path(name: str) -> bool:
    """Whether a model name is a path (absolute, relative with a dot, or an existing folder) rather than a hub id."""
    return Path(name).is_absolute() or name.startswith(("./", "../", "~")) or Path(name).is_dir()


def model_key(name: str) -> str:
    """A model's name in cache keys: a folder by its absolute path (the same wherever it was named from), a hub id
    as it is."""
    return str(Path(name).resolve()) if Path(name).is_dir() else name


def _document_embeddings(doc_ids: list[str], documents: Documents, encode: Callable[[list[str]], torch.Tensor],
                         model: tuple[str, int]) -> dict[str, torch.Tensor]:
    """Embeddings of ``doc_ids``: those in the cache, and the others encoded now and added to it."""
    path = cache_path("embeddings", *model, documents.source(), documents.fingerprint(), suffix=".safetensors")
    cached: dict[str, torch.Tensor] = {}
    if intact(path, "document embeddings"):
        with safe_open(path, "pt") as handle:
            ids = json.loads(handle.metadata()["doc_ids"])
            cached = dict(zip(ids, handle.get_tensor("embeddings")))
    missing = [doc for doc in doc_ids if doc not in cached]
    if missing:
        logger.info("bi-encoder %s: embedding %d documents (%d from the cache)", model[0], len(missing),
                    len(doc_ids) - len(missing))
        cached.update(zip(missing, encode([documents.text(doc) for doc in missing])))
        ids = sorted(cached)
        with atomic_write(path, "wb", finish=sealing(path)) as handle:
            handle.write(save({"embeddings": torch.stack([cached[doc] for doc in ids])},
                              metadata={"doc_ids": json.dumps(ids)}))
    return {doc: cached[doc] for doc in doc_ids}
