"""Re-ranking from Python with the ranker a fit deploys: :class:`Reranker`.

    >>> reranker = Reranker.from_pretrained("runs/cranfield/model")  # doctest: +SKIP
    >>> reranker.ranker  # doctest: +SKIP
    'fused'
    >>> reranker.rerank("wind tunnel", ["doc one", "doc two"], first_stage_scores=[12.3, 8.1])  # doctest: +SKIP
    [(0, 1.03), (1, -1.03)]
    >>> pure = Reranker.from_pretrained("runs/cranfield/model", ranker="reranker")  # doctest: +SKIP
    >>> pure.rerank("wind tunnel", ["doc one", "doc two"])  # doctest: +SKIP
    [(0, 1.73), (1, -0.42)]

A folder exported by ``rerank fit`` records the ranker chosen on validation (:mod:`rerank.ranker.deployment`): the pure
cross-encoder, ``interpolated`` with the first stage, or ``fused`` with the zero-shot teacher and the first stage.
:meth:`Reranker.score`, :meth:`~Reranker.rerank` and :meth:`~Reranker.rerank_many` re-rank with it, as ``rerank
predict`` does: the fusions standardise each part's scores over a query's candidates, so they score a query's
candidate list, and need the candidates' first-stage scores (``first_stage_scores``; called without them, they
fail, saying what to pass). ``ranker="reranker"`` gives the pure cross-encoder's scores, and
:meth:`~rerank.model.scorer.PairScorer.score_pairs` scores lone pairs with it whatever the deployment. Any other
one-label cross-encoder (or a folder exported before deployments) re-ranks as the pure model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..config.precision import SCORING_CHOICES
from ..data.trec import Run, restrict
from ..evaluation.calibration import Calibration
from ..model.cross_encoder import CrossEncoderModel, require_trained_head
from ..model.scorer import CandidateTexts, PairScorer, scoring_device
from ..ranker.deployment import Deployment, check_teacher, saved_calibration, saved_deployment
from ..ranker.memo import REMEMBER, EmbeddingMemo, cosines_of_texts
from ..teacher.scores import blend, load_bi_encoder
from .fast_scoring import resolve_precision, saved_gates

__all__ = ["CandidateTexts", "Reranker"]

RANKER_CHOICES = ("deployed", "reranker")


class Reranker(PairScorer):
    """Re-ranks a query's candidates with the deployed ranker (the pure cross-encoder by default).

    Args:
        model: the cross-encoder.
        deployment: the ranker to re-rank with and what it needs (default: the pure cross-encoder).
        remember: the teacher's embeddings of this many distinct documents are kept (least recently used out), so
            that a deployed ``fused`` ranker embeds a document seen before from memory, costing what the pure
            cross-encoder costs (default :data:`rerank.ranker.memo.REMEMBER`, 10,000; 0: none; ``rerank serve``
            keeps 50,000).
        calibration: the map from the deployed ranker's score to a probability of relevance (the export's:
            :mod:`rerank.evaluation.calibration`), which ``calibrated=True`` reports; None: none.
        precision: what the cross-encoder scores in (:data:`rerank.config.precision.SCORING_CHOICES`): ``auto``, the
            fastest that passed the export's quality gate and that this CPU runs fast
            (:mod:`rerank.inference.fast_scoring`); a fast path that failed its gate is refused.
        **options: those of :class:`~rerank.model.scorer.PairScorer` (``batch_size``, ``device``, tokenization
            overrides).

    Attributes:
        precision: what it scores in (``auto`` resolved); ``precision_reason``: why, in words.
        gates: the quality gates the export records, by fast path.
        calibration: the deployed ranker's calibration (None: none); :attr:`threshold`: its cut-off.
    """

    def __init__(self, model: CrossEncoderModel, deployment: Deployment | None = None, remember: int = REMEMBER,
                 precision: str = "32", calibration: Calibration | None = None, **options: object) -> None:
        if precision not in SCORING_CHOICES:
            raise ValueError(f"precision must be one of {', '.join(SCORING_CHOICES)}; got {precision!r}")
        self.gates = saved_gates(model.model.config)
        device = scoring_device(options.get("device"))
        precision, self.precision_reason = resolve_precision(precision, self.gates, device, "this model")
        super().__init__(model, precision=precision, **options)
        self.deployment = deployment or Deployment()
        self.calibration = calibration
        teacher = self.deployment.teacher
        self.bi_encoder = (load_bi_encoder(teacher.bi_encoder, teacher.max_length, str(self.device))
                           if self.deployment.needs_teacher else None)
        self.memo = EmbeddingMemo(remember) if remember and self.bi_encoder is not None else None

    @classmethod
    def from_pretrained(cls, name_or_path: str, ranker: str = "deployed", untrained_head: bool = False,
                        **options: object) -> Reranker:
        """A reranker from an exported folder (its deployed ranker, or with ``ranker="reranker"`` the pure
        cross-encoder) or a sequence-classification cross-encoder; an encoder whose weights hold no scoring head
        only with ``untrained_head`` (its scores then come from a random head, and :attr:`untrained_head` says so).

        Raises:
            UserError: the model's scoring head is not in its weights, and ``untrained_head`` is not set.
            OSError: the deployed ranker's teacher cannot be loaded, naming the folder and the teacher.
        """
        if ranker not in RANKER_CHOICES:
            raise ValueError(f"ranker must be one of {', '.join(RANKER_CHOICES)}; got {ranker!r}")
        model = CrossEncoderModel.from_pretrained(name_or_path)
        if not untrained_head:
            require_trained_head(model, name_or_path)
        deployment, calibration = Deployment(), None
        if ranker == "deployed":
            config = model.model.config
            deployment, calibration = saved_deployment(config, name_or_path), saved_calibration(config)
        if deployment.needs_teacher:
            check_teacher(deployment.teacher, name_or_path)
        return cls(model, deployment, calibration=calibration, **options)

    @property
    def untrained_head(self) -> bool:
        """Whether the cross-encoder scores with a head that its weights did not hold (freshly initialised)."""
        return not self.model.head_trained

    @property
    def ranker(self) -> str:
        """``reranker``, ``interpolated`` or ``fused``: what :meth:`score` and :meth:`rerank` give."""
        return self.deployment.ranker

    def score(self, query: str, documents: Sequence[str],
              first_stage_scores: Sequence[float] | None = None, calibrated: bool = False) -> list[float]:
        """The deployed ranker's score of each of ``documents`` (a query's candidates) for ``query``.

        Args:
            first_stage_scores: each document's first-stage score (BM25's, say), in the order of ``documents``;
                needed when the deployed ranker mixes them.
            calibrated: each score as its probability of relevance (:meth:`probabilities`).
        """
        first_stage = None if first_stage_scores is None else {"q": dict(enumerate(first_stage_scores))}
        run = self.rerank_many({"q": query}, {"q": dict(enumerate(documents))}, first_stage)
        scores = [run["q"][index] for index in range(len(documents))] if documents else []
        return self.probabilities(scores) if calibrated else scores

    def rerank(self, query: str, documents: Sequence[str], top_k: int | None = None,
               first_stage_scores: Sequence[float] | None = None, calibrated: bool = False,
               min_score: float | None = None) -> list[tuple[int, float]]:
        """``(index into documents, score)`` by the deployed ranker, best first (ties: the earlier document first);
        with ``calibrated``, each score its probability of relevance, in the same order; with ``min_score``, only
        the documents whose (reported) score is at least it (the export's cut-off: :attr:`threshold`)."""
        scores = self.score(query, documents, first_stage_scores)
        reported = self.probabilities(scores) if calibrated else scores
        ranked = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
        return [(index, reported[index]) for index in ranked
                if min_score is None or reported[index] >= min_score][:top_k]

    @property
    def threshold(self) -> float | None:
        """The probability cut-off of the export's calibration (the best F1 on the fit's validation pairs)."""
        return self.calibration.threshold if self.calibration is not None else None

    def probabilities(self, scores: Sequence[float]) -> list[float]:
        """The deployed ranker's ``scores`` as probabilities of relevance, by the export's calibration.

        Raises:
            ValueError: the model carries no calibration.
        """
        if self.calibration is None:
            raise ValueError("this reranker has no calibration: a folder exported by rerank fit carries its deployed "
                             "ranker's (ranker='reranker' and other models have none); use the raw scores")
        return self.calibration.probabilities(scores).tolist()

    def rerank_many(self, queries: Mapping[str, str], candidates: Mapping[str, Mapping[str, str]],
                    first_stage: Mapping[str, Mapping[str, float]] | None = None, progress: str | None = None) -> Run:
        """The deployed ranker's run ``{query id: {doc id: score}}`` for ``candidates`` (``{query id: {doc id:
        text}}``), with the candidates' ``first_stage`` scores (``{query id: {doc id: score}}``) where it mixes
        them. The cross-encoder's pairs are batched across queries (:meth:`PairScorer.rerank_many`); a deployed
        ranker that gives the cross-encoder no weight (the teacher alone) does not run it.

        Raises:
            ValueError: the deployed ranker mixes the first stage and ``first_stage`` lacks a candidate's score.
        """
        deployment = self.deployment
        if deployment.needs_first_stage:
            first_stage = self._first_stage(candidates, first_stage)
        pure = (super().rerank_many(queries, candidates, progress) if deployment.uses_reranker
                else {qid: dict.fromkeys(docs, 0.0) for qid, docs in candidates.items()})  # weighs 0: adds nothing
        teacher = None
        if deployment.needs_teacher:
            teacher = cosines_of_texts(self.bi_encoder, queries, candidates, memo=self.memo)
            teacher = blend(teacher, first_stage, deployment.teacher.first_stage_weight)
        return deployment.combine(pure, first_stage, teacher)

    def _first_stage(self, candidates: Mapping[str, Mapping[str, str]],
                     first_stage: Mapping[str, Mapping[str, float]] | None) -> Run:
        """The first-stage scores of every candidate, or a ValueError that says what to pass."""
        advice = (f"this model deploys {self.deployment.describe()}, which mixes the candidates' first-stage scores: "
                  "pass first_stage_scores (one per document, e.g. BM25's; rerank_many: first_stage), or load it "
                  "with Reranker.from_pretrained(folder, ranker='reranker') for the pure cross-encoder")
        if first_stage is None:
            raise ValueError(advice)
        missing = [(qid, doc) for qid, docs in candidates.items() for doc in docs
                   if doc not in first_stage.get(qid, {})]
        if missing:
            raise ValueError(f"no first-stage score for {len(missing)} candidate(s), e.g. query {missing[0][0]!r} "
                             f"document {missing[0][1]!r} (first_stage_scores must give one per document); {advice}")
        return restrict(first_stage, candidates)
