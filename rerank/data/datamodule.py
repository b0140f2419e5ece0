"""The Lightning data module: a collection, its first-stage candidates and a fold split, as typed batches.

Configured under ``data:`` in the YAML (the sections ``collection``, ``first_stage`` and ``folds`` are those of
:class:`~rerank.data.collection.CollectionConfig`, :class:`~rerank.first_stage.FirstStageConfig` and
:class:`~rerank.data.folds.FoldsConfig`)::

    data:
      collection: {ir_datasets: disks45/nocr/trec-robust-2004, query_field: title}
      first_stage: {backend: pyserini, retrieval_depth: 1000}
      folds: {scheme: robust04, test: 1}
      rerank_depth: 150     # candidates re-ranked per query (training lists are drawn from them too)
      list_size: 4
      strategy: pairs

The tokenization comes from the model (``model.tokenization``, linked by the CLI). ``prepare_data`` (once per
node) retrieves the first-stage run of every query and writes it to the run directory's ``first_stage.trec``;
``setup`` (every process) reads it and checks, before any training, that the run and the qrels share queries
and that training lists can be drawn. :meth:`RerankDataModule.judgments` gives the qrels of a split to whoever
evaluates (the CLI hands it to :class:`~rerank.lightning_module.RerankModule`).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from ..cross_encoder import load_tokenizer, resolve_tokenization
from ..first_stage import FirstStageConfig, retrieve
from ..run_directory import RunDirectory
from .batches import EvaluationCollator, TrainingCollator
from .collection import Collection, CollectionConfig, as_collection_config
from .examples import (
    Candidates,
    EvaluationBatches,
    ShardSampler,
    TrainingLists,
    TrainingSampler,
    candidate_lists,
    trainable,
)
from .folds import SPLITS, FoldsConfig, Split, make_split
from .tokenization import PairTokenizer, TokenizationConfig
from .trec import Qrels, Run, read_run, write_run

logger = logging.getLogger(__name__)


class RerankDataModule(pl.LightningDataModule):
    """Training lists, validation and test pairs for one fold of a collection, or every query for prediction.

    Args:
        collection: where documents, queries and qrels come from (a later ``collection:`` in a stacked config
            replaces an earlier one as a whole).
        first_stage: where the candidates come from (BM25 through pyserini or bm25s, or a run file).
        folds: the query split; validation and test use the folds that ``folds.test`` names.
        model_name: the tokenizer's model (linked from ``model.model_name`` by the CLI).
        tokenization: lengths and passages (linked from ``model.tokenization``; None: the model's own).
        output_dir: the run directory, where the first-stage run is written (linked from ``--output_dir``).
        rerank_depth: candidates per query that are re-ranked, and that training lists are drawn from.
        list_size: candidates per training list.
        strategy: ``top``, ``random`` or ``pairs`` (see :mod:`rerank.data.examples`).
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
        collection: CollectionConfig | dict[str, Any],
        first_stage: FirstStageConfig | None = None,
        folds: FoldsConfig | None = None,
        model_name: str = "bert-base-uncased",
        tokenization: TokenizationConfig | None = None,
        output_dir: str = "runs/default",
        rerank_depth: int = 100,
        list_size: int = 8,
        strategy: str = "random",
        batch_size: int = 1,
        repeats: int = 1,
        eval_batch_size: int = 64,
        predict_queries: str = "all",
        num_workers: int = 0,
        seed: int = 42,
    ) -> None:
        super().__init__()
        for name, value in (("rerank_depth", rerank_depth), ("list_size", list_size), ("batch_size", batch_size),
                            ("repeats", repeats), ("eval_batch_size", eval_batch_size)):
            if value < 1:
                raise ValueError(f"data.{name} must be positive; got {value}")
        if predict_queries not in ("all", *SPLITS):
            raise ValueError(f"data.predict_queries must be all or one of {', '.join(SPLITS)}; got {predict_queries!r}")
        self.collection_config = as_collection_config(collection, "data.collection")
        self.first_stage_config = first_stage or FirstStageConfig()
        if rerank_depth > self.first_stage_config.retrieval_depth:
            raise ValueError(f"data.rerank_depth ({rerank_depth}) exceeds data.first_stage.retrieval_depth "
                             f"({self.first_stage_config.retrieval_depth}): re-rank at most what the first stage "
                             "retrieves")
        self.folds_config = folds or FoldsConfig()
        self.model_name, self.directory = model_name, RunDirectory(Path(output_dir))
        self.tokenization = resolve_tokenization(model_name, tokenization)
        self.rerank_depth, self.list_size, self.strategy = rerank_depth, list_size, strategy
        self.batch_size, self.repeats, self.eval_batch_size = batch_size, repeats, eval_batch_size
        self.predict_queries, self.num_workers, self.seed = predict_queries, num_workers, seed
        self.collection = Collection(self.collection_config)
        self._split: Split | None = None
        self.lists: dict[str, list[Candidates]] = {}
        self._evaluation: dict[str, EvaluationBatches] = {}
        self._train_sampler: TrainingSampler | None = None
        self._resume: tuple[int, int] | None = None

    def prepare_data(self) -> None:
        """Retrieve the first-stage candidates of every query and write them to the run directory.

        pyserini retrieval runs in a child process: its JVM, with its own signal handlers and threads, crashes
        the PyTorch process that it shares (segmentation faults seen after training on Cranfield).
        """
        arguments = (self.collection_config, self.first_stage_config, self.directory.first_stage_run)
        if self.first_stage_config.backend != "pyserini":
            write_first_stage_run(*arguments)
            return
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            pool.submit(write_first_stage_run, *arguments).result()

    @property
    def split(self) -> Split:
        """The fold split of the judged queries."""
        if self._split is None:
            self._split = make_split(self.folds_config, self.collection.qrels)
        return self._split

    def setup(self, stage: str | None = None) -> None:
        wanted = "predict" if stage == "predict" else "train"
        if wanted in self.lists:
            return
        run = read_run(self.directory.first_stage_run)
        if stage == "predict":
            self._set_lists(run, {"predict": self._predict_query_ids(run)}, {})
            return
        qrels = self.collection.qrels
        check_overlap(run, qrels, self.directory.first_stage_run)
        self._set_lists(run, {name: getattr(self.split, name) for name in SPLITS}, qrels)
        usable = [c for c in self.lists["train"] if trainable(c, self.strategy)]
        skipped = len(self.lists["train"]) - len(usable)
        if not usable:
            raise ValueError(f"none of the {len(self.lists['train'])} training queries has a relevant candidate in "
                             f"its top {self.rerank_depth} (data.rerank_depth); nothing to train on")
        if skipped:
            logger.info("%d of %d training queries have no relevant candidate in the top %d (or, for pairs, no "
                        "non-relevant one) and are not trained on", skipped, len(self.lists["train"]),
                        self.rerank_depth)
        self.lists["train"] = usable

    def _predict_query_ids(self, run: Run) -> list[str]:
        if self.predict_queries == "all":
            return list(run)
        return getattr(self.split, self.predict_queries)

    def _set_lists(self, run: Run, query_ids: Mapping[str, list[str]], qrels: Qrels) -> None:
        queries = self.collection.queries
        for name, ids in query_ids.items():
            self.lists[name] = candidate_lists(run, queries, qrels, ids, self.rerank_depth)
            if not self.lists[name]:
                raise ValueError(f"no {name} query of fold {self.folds_config.test} has first-stage candidates "
                                 f"in {self.directory.first_stage_run}")

    def judgments(self, split: str) -> Qrels:
        """The qrels of the judged queries of ``split`` (``train``, ``validation`` or ``test``)."""
        qrels = self.collection.qrels
        return {qid: qrels[qid] for qid in getattr(self.split, split) if qid in qrels}

    def _tokenizer(self) -> PairTokenizer:
        return PairTokenizer(load_tokenizer(self.model_name), self.tokenization)

    def _world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)

    def train_dataloader(self) -> DataLoader:
        dataset = TrainingLists(self.lists["train"], self.collection.documents, self.list_size, self.strategy,
                                self.seed)
        world, rank = self._world()
        self._train_sampler = TrainingSampler(dataset, self.repeats, self.batch_size, world, rank, self.seed)
        if self._resume is not None:
            self._train_sampler.resume(*self._resume)
            self._resume = None
        return DataLoader(dataset, batch_size=self.batch_size, sampler=self._train_sampler,
                          collate_fn=TrainingCollator(self._tokenizer(), self.list_size),
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def _evaluation_dataloader(self, split: str) -> DataLoader:
        if split not in self._evaluation:  # sorted by document length once, not at every validation
            documents = self.collection.documents
            self._evaluation[split] = EvaluationBatches(self.lists[split], documents, self.eval_batch_size,
                                                        length=lambda doc: len(documents.text(doc)))
        dataset = self._evaluation[split]
        world, rank = self._world()
        return DataLoader(dataset, batch_size=None, sampler=ShardSampler(dataset, world, rank),
                          collate_fn=EvaluationCollator(self._tokenizer()), num_workers=self.num_workers)

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
        if state:
            self._resume = (state["epoch"], state["batches"])


def write_first_stage_run(collection: CollectionConfig, first_stage: FirstStageConfig, path: Path) -> None:
    """Retrieve the candidates of every query of ``collection`` and write them as a TREC run."""
    run = retrieve(Collection(collection), first_stage)
    write_run(run, path, tag=f"first-stage-{first_stage.backend}")


def check_overlap(run: Run, qrels: Qrels, where: Path) -> None:
    """Fail early when the run and the qrels have no query in common."""
    shared = run.keys() & qrels.keys()
    if not shared:
        raise ValueError(f"the first-stage run {where} ({len(run)} queries, e.g. {sorted(run)[:3]}) and the qrels "
                         f"({len(qrels)} queries, e.g. {sorted(qrels)[:3]}) share no query id; check that they "
                         "belong to the same collection")
