"""The Lightning data module: a collection, its first-stage candidates and a fold split, as typed batches.

Configured under ``data:`` in the YAML (the sections ``collection``, ``first_stage``, ``folds`` and ``train``
are those of :class:`~rerank.data.collection_config.CollectionConfig`,
:class:`~rerank.config.first_stage.FirstStageConfig`, :class:`~rerank.data.folds.FoldsConfig` and
:class:`~rerank.config.source.SourceConfig`)::

    data:
      collection: {ir_datasets: disks45/nocr/trec-robust-2004, query_field: title}
      first_stage: {backend: pyserini, retrieval_depth: 1000}
      folds: {scheme: robust04, test: 1}
      rerank_depth: 150     # candidates re-ranked per query (training lists are drawn from them too)
      list_size: 4
      strategy: pairs
      train: [...]          # training sources (default: the training folds' queries with their qrels)

The tokenization comes from the model (``model.tokenization``, linked by the CLI). ``prepare_data`` (once per
node) writes the first-stage run of every query to the run directory's ``first_stage.trec`` (BM25's retrieved
once into ``$RERANK_CACHE/first_stage``, then copied: every fold of ``rerank cv`` and the test phase reuse it),
and makes the training sources' lists (caching their candidates, pseudo-queries, teacher scores); ``setup``
(every process) makes them from the caches where ``prepare_data`` did not run, and checks, before any training,
that every source has lists to draw. Validation and test pairs are built when first needed, after checking that
the run and the qrels share queries.
:meth:`RerankDataModule.judgments` gives the qrels of a split to whoever evaluates (the CLI hands it to
:class:`~rerank.training.lightning_module.RerankModule`).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader

from ..config.source import SourceConfig, as_source_configs
from ..config.tokenization import TokenizationConfig
from ..core import preemption
from ..core.atomic import atomic_write
from ..core.checks import check_range
from ..core.run_directory import RunDirectory
from ..data.candidates import CandidateLists, read_candidates
from ..data.collection import Collection
from ..data.collection_config import CollectionConfig, as_collection_config
from ..data.folds import SPLITS, FoldsConfig, Split, make_split
from ..data.trec import Qrels
from ..first_stage import FirstStageConfig, cached_run, write_first_stage_run
from ..model.cross_encoder import load_tokenizer, resolve_tokenization
from ..model.sizing import cut_queries, query_lengths
from ..model.tokenization import PairTokenizer
from ..teacher.scores import TeacherRuns
from .batches import EvaluationCollator, TrainingCollator
from .head_checks import MODEL_NAME
from .lists import QRELS_STRATEGIES, EvaluationBatches, ShardSampler, TrainingLists, TrainingSampler, TrainingSource
from .sources import SourceContext, resolve

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSettings:
    """What shapes a data module's training lists besides its sources: what the pre-training stage shares with the
    main run, and keys its cache by (:mod:`rerank.training.pretraining`)."""

    collection: CollectionConfig
    first_stage: FirstStageConfig
    model_name: str
    tokenization: TokenizationConfig
    rerank_depth: int
    list_size: int
    strategy: str
    batch_size: int
    seed: int


class RerankDataModule(pl.LightningDataModule):
    """Training lists, validation and test pairs for one fold of a collection, or every query for prediction.

    Args:
        collection: where documents, queries and qrels come from (a later ``collection:`` in a stacked config
            replaces an earlier one as a whole).
        first_stage: where the candidates come from (BM25 through pyserini or bm25s, or a run file).
        folds: the query split; validation and test use the folds that ``folds.test`` names.
        train: the training sources (:mod:`rerank.training.sources`); default: ``[{queries: train}]``, the training
            folds' queries with their qrels.
        model_name: the tokenizer's model (linked from ``model.model_name`` by the CLI).
        tokenization: lengths and passages (linked from ``model.tokenization``; None: the model's own).
        output_dir: the run directory, where the first-stage run is written (linked from ``--output_dir``).
        rerank_depth: candidates per query that are re-ranked, and that training lists are drawn from.
        list_size: candidates per training list.
        strategy: ``top``, ``random`` or ``pairs`` for sources that learn from qrels (see
            :mod:`rerank.training.lists`).
        batch_size: training lists per batch.
        repeats: visits of each training query per epoch.
        eval_batch_size: (query, candidate) pairs per evaluation batch.
        predict_queries: the queries :meth:`predict_dataloader` scores: ``all`` or a split (``train``,
            ``validation``, ``test``) of ``folds``.
        num_workers: DataLoader worker processes (tokenization happens there).
        seed: seeds the training lists and their order.
    """

    def __init__(
        self,
        collection: dict[str, Any] | CollectionConfig | None = None,
        first_stage: FirstStageConfig | None = None,
        folds: FoldsConfig | None = None,
        train: Sequence[dict[str, Any] | SourceConfig] | None = None,
        model_name: str | None = None,
        tokenization: TokenizationConfig | None = None,
        output_dir: str = "runs/default",
        rerank_depth: int = 100,
        list_size: int = 8,
        strategy: Literal[QRELS_STRATEGIES] = "random",
        batch_size: int = 1,
        repeats: int = 1,
        eval_batch_size: int = 64,
        predict_queries: Literal[("all", *SPLITS)] = "all",
        num_workers: int = 0,
        seed: int = 42,
    ) -> None:
        super().__init__()
        for name, value in (("rerank_depth", rerank_depth), ("list_size", list_size), ("batch_size", batch_size),
                            ("repeats", repeats), ("eval_batch_size", eval_batch_size)):
            check_range(f"data.{name}", value, 1)
        check_range("data.num_workers", num_workers, 0)
        if predict_queries not in ("all", *SPLITS):
            raise ValueError(f"data.predict_queries must be all or one of {', '.join(SPLITS)}; got {predict_queries!r}")
        if strategy not in QRELS_STRATEGIES:
            raise ValueError(f"data.strategy must be one of {', '.join(QRELS_STRATEGIES)}; got {strategy!r}")
        if strategy == "pairs" and list_size % 2:
            raise ValueError(f"data.strategy pairs needs an even data.list_size; got {list_size}")
        self.collection_config = as_collection_config(collection or {}, "data.collection")
        self.first_stage_config = first_stage or FirstStageConfig()
        if rerank_depth > self.first_stage_config.retrieval_depth:
            raise ValueError(f"data.rerank_depth ({rerank_depth}) exceeds data.first_stage.retrieval_depth "
                             f"({self.first_stage_config.retrieval_depth}): re-rank at most what the first stage "
                             "retrieves")
        self.folds_config = folds or FoldsConfig()
        self.sources = as_source_configs(train or [{}], "data.train")
        for index, source in enumerate(self.sources):
            if source.pseudo is not None and not source.pseudo.sized:
                raise ValueError(f"data.train[{index}].pseudo: max_words auto and lengths queries are sized from the "
                                 "collection's queries first (rerank.training.resolution; the commands do it): give "
                                 "numbers here")
        if model_name is None:
            raise ValueError(MODEL_NAME)
        self.model_name, self.directory = model_name, RunDirectory(Path(output_dir))
        self.tokenization = resolve_tokenization(model_name, tokenization).check_resolved()
        self.rerank_depth, self.list_size, self.strategy = rerank_depth, list_size, strategy
        self.batch_size, self.repeats, self.eval_batch_size = batch_size, repeats, eval_batch_size
        self.predict_queries, self.num_workers, self.seed = predict_queries, num_workers, seed
        self.collection = Collection(self.collection_config)
        self._split: Split | None = None
        self._run: CandidateLists | None = None
        self.training: list[TrainingSource] = []
        self.lists: dict[str, CandidateLists] = {}
        self._evaluation: dict[str, EvaluationBatches] = {}
        self._train_sampler: TrainingSampler | None = None
        self._resume: tuple[int, int] | None = None
        self._budget_checked: set[str] = set()
        self._teacher_runs: dict[str, TeacherRuns | None] = {}

    @property
    def settings(self) -> DataSettings:
        """What shapes this module's training lists besides its sources (:class:`DataSettings`)."""
        return DataSettings(collection=self.collection_config, first_stage=self.first_stage_config,
                            model_name=self.model_name, tokenization=self.tokenization,
                            rerank_depth=self.rerank_depth, list_size=self.list_size, strategy=self.strategy,
                            batch_size=self.batch_size, seed=self.seed)

    def with_sources(self, sources: Sequence[SourceConfig], output_dir: Path) -> RerankDataModule:
        """A data module like this one (collection, first stage, folds, lists, batches) that trains on ``sources``
        and writes to ``output_dir``: the pre-training stage's (:mod:`rerank.training.pretraining`)."""
        return RerankDataModule(
            collection=self.collection_config, first_stage=self.first_stage_config, folds=self.folds_config,
            train=list(sources), model_name=self.model_name, tokenization=self.tokenization,
            output_dir=str(output_dir), rerank_depth=self.rerank_depth, list_size=self.list_size,
            strategy=self.strategy, batch_size=self.batch_size, repeats=self.repeats,
            eval_batch_size=self.eval_batch_size, predict_queries=self.predict_queries,
            num_workers=self.num_workers, seed=self.seed)

    def prepare_data(self) -> None:
        """Retrieve the first-stage candidates of every query into the run directory (unless nothing reads them:
        a training-only stage on sources of their own), and make the training sources' lists (their candidates,
        pseudo-queries and teacher scores cached on the way), once, when it prepares for training. The
        collection's queries and qrels are read first: a mistake in them fails before the retrieval, which can take
        long."""
        self.collection.queries  # noqa: B018 (read and checked)
        if self.collection.has_qrels:
            self.collection.qrels  # noqa: B018
        if self._reads_first_stage_run():
            with preemption.phase("the first stage"):
                self._write_first_stage_run()
        if self._fits():  # kept for setup (the same process): lists are made once
            with preemption.phase("the training lists (their candidates and teacher scores)"):
                self.training_sources()

    def _write_first_stage_run(self) -> None:
        """The first-stage run into the run directory: BM25's from the cache (:func:`cached_run`: retrieved once for
        every fold and phase); a given run file's read and checked anew (it may have changed in place)."""
        path = self.directory.first_stage_run
        if self.first_stage_config.backend == "run":
            write_first_stage_run(self.collection_config, self.first_stage_config, path)
            return
        cached = cached_run(self.collection, self.first_stage_config, self.collection.queries)
        with cached.open("rb") as source, atomic_write(path, "wb") as target:
            shutil.copyfileobj(source, target)

    def _fits(self) -> bool:
        """Whether the data is prepared for training (not for a test or prediction alone, which read no lists)."""
        return self.trainer is None or self.trainer.state.fn == TrainerFn.FITTING

    def _reads_first_stage_run(self) -> bool:
        trainer = self.trainer
        evaluates = (trainer is None or trainer.state.fn != TrainerFn.FITTING or trainer.limit_val_batches != 0)
        return evaluates or any(source.uses_judgments for source in self.sources)

    @property
    def split(self) -> Split:
        """The fold split of the judged queries."""
        if self._split is None:
            self._split = make_split(self.folds_config, self.collection.qrels)
        return self._split

    @property
    def run(self) -> CandidateLists:
        """The first-stage run of every query (what ``prepare_data`` wrote), as compact arrays."""
        if self._run is None:
            self._run = read_candidates(self.directory.first_stage_run)
        return self._run

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None):
            model = self.trainer.lightning_module if self.trainer is not None else None
            if hasattr(model, "check_data"):  # once per fit, before any list is made: can its heads learn from them?
                model.check_data(self.list_size, {"data.train": self.sources})
            for source in self.training_sources():  # made here by a process that did not prepare the data
                self._check_query_budget(source.lists, source.name)

    def _check_query_budget(self, lists: CandidateLists, where: str) -> None:
        """Warn, once per ``where``, when ``model.tokenization.max_query_length`` cuts queries of ``lists``."""
        if where in self._budget_checked or not lists:
            return
        self._budget_checked.add(where)
        lengths = query_lengths(load_tokenizer(self.model_name), lists.queries)
        warning = cut_queries(lengths, self.tokenization.max_query_length, where)
        if warning:
            logger.warning(warning)

    def training_sources(self) -> list[TrainingSource]:
        """The training sources' lists, made once (their candidates, pseudo-queries and teacher scores cached on the
        way; the training folds' need the first-stage run that ``prepare_data`` writes)."""
        if not self.training:
            self.training = self._resolve_sources()
        return self.training

    def _resolve_sources(self) -> list[TrainingSource]:
        uses_folds = any(source.uses_judgments for source in self.sources)
        if uses_folds:
            check_overlap(self.run, self.collection.qrels, self.directory.first_stage_run)
        context = SourceContext(collection=self.collection, first_stage=self.first_stage_config,
                                first_stage_run=self.run if uses_folds else None,
                                train_query_ids=self.split.train if uses_folds else None,
                                rerank_depth=self.rerank_depth, strategy=self.strategy)
        return [resolve(source, f"data.train[{i}]", context) for i, source in enumerate(self.sources)]

    def evaluation_lists(self, split: str) -> CandidateLists:
        """The candidates of ``split`` (``validation``, ``test``, or ``predict``: :attr:`predict_queries`)."""
        if split not in self.lists:
            run = self.run
            if split == "predict":
                query_ids = run.query_ids if self.predict_queries == "all" else getattr(self.split,
                                                                                        self.predict_queries)
                qrels: Qrels = {}
            else:
                qrels = self.collection.qrels
                check_overlap(run, qrels, self.directory.first_stage_run)
                query_ids = getattr(self.split, split)
            self.lists[split] = run.select(query_ids, self.rerank_depth, self.collection.queries, qrels)
            if not self.lists[split]:
                raise ValueError(f"no {split} query of fold {self.folds_config.test} has first-stage candidates "
                                 f"in {self.directory.first_stage_run}")
            self._check_query_budget(self.lists[split], f"the {split} queries of {self.collection.name}")
        return self.lists[split]

    def teacher_run(self, split: str) -> TeacherRuns | None:
        """The scores that the teacher the model learns from (that of the first training source with one) gives
        the candidates of ``split``, for fusion (:mod:`rerank.evaluation.fusion`) and reports, with its bi-encoder's
        alone; None without such a teacher, or, with a warning, when it cannot score them (a teacher run without
        these queries)."""
        teacher = next((source.teacher for source in self.sources
                        if source.teacher is not None and source.targets != "qrels"), None)
        if teacher is None:
            return None
        if split not in self._teacher_runs:
            try:
                self._teacher_runs[split] = TeacherRuns.of(teacher, self.evaluation_lists(split).as_run(),
                                                           self.collection.queries,
                                                           self.collection.documents)
            except ValueError as error:
                logger.warning("no fusion with the teacher on the %s queries: %s", split, error)
                self._teacher_runs[split] = None
        return self._teacher_runs[split]

    def judgments(self, split: str) -> Qrels:
        """The qrels of the judged queries of ``split`` (``train``, ``validation`` or ``test``)."""
        qrels = self.collection.qrels
        return {qid: qrels[qid] for qid in getattr(self.split, split) if qid in qrels}

    def tokenizer(self) -> PairTokenizer:
        """The (query, document) tokenizer of this module's model and tokenization."""
        return PairTokenizer(load_tokenizer(self.model_name), self.tokenization)

    def _world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)

    def _on_gpu(self) -> bool:
        """Whether batches go to a GPU: then the loaders pin them (:mod:`rerank.data.pinning`)."""
        return self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"

    def train_dataloader(self) -> DataLoader:
        dataset = TrainingLists(self.training, self.list_size, self.seed)
        world, rank = self._world()
        self._train_sampler = TrainingSampler(dataset, self.repeats, self.batch_size, world, rank, self.seed)
        if self._resume is not None:
            self._train_sampler.resume(*self._resume)
            self._resume = None
        return DataLoader(dataset, batch_size=self.batch_size, sampler=self._train_sampler,
                          collate_fn=TrainingCollator(self.tokenizer(), self.list_size),
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
                          pin_memory=self._on_gpu())

    def _evaluation_dataloader(self, split: str) -> DataLoader:
        if split not in self._evaluation:  # sorted by document length once, not at every validation
            documents = self.collection.documents
            self._evaluation[split] = EvaluationBatches(self.evaluation_lists(split), documents, self.eval_batch_size,
                                                        length=lambda doc: len(documents.text(doc)))
        dataset = self._evaluation[split]
        world, rank = self._world()
        return DataLoader(dataset, batch_size=None, sampler=ShardSampler(dataset, world, rank),
                          collate_fn=EvaluationCollator(self.tokenizer()), num_workers=self.num_workers,
                          pin_memory=self._on_gpu())

    def val_dataloader(self) -> DataLoader:
        return self._evaluation_dataloader("validation")

    def test_dataloader(self) -> DataLoader:
        return self._evaluation_dataloader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._evaluation_dataloader("predict")

    def state_dict(self) -> dict[str, int]:
        """Where the training pass stands, so that a resumed run skips the batches already trained on."""
        trainer = self.trainer
        if trainer is None or not trainer.training:
            return {}
        return {"epoch": trainer.current_epoch,
                "batches": trainer.fit_loop.epoch_loop.batch_progress.current.processed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Skip the batches already trained on when a fit resumes; a checkpoint loaded to test or predict trains
        nothing, so nothing is skipped or said."""
        if state and self.trainer is not None and self.trainer.state.fn == TrainerFn.FITTING:
            self._resume = (state["epoch"], state["batches"])
            logger.info("resuming epoch %d after its first %d batches: they are skipped, so that the run goes on as "
                        "an uninterrupted one would", state["epoch"], state["batches"])


def check_overlap(run: CandidateLists, qrels: Qrels, where: Path) -> None:
    """Fail early when the run and the qrels have no query in common."""
    shared = qrels.keys() & set(run.query_ids)
    if not shared:
        raise ValueError(f"the first-stage run {where} ({len(run)} queries, e.g. {sorted(run.query_ids)[:3]}) and "
                         f"the qrels ({len(qrels)} queries, e.g. {sorted(qrels)[:3]}) share no query id; check that "
                         "they belong to the same collection")
