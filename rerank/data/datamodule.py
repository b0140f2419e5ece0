"""The Lightning data module: a collection, its first-stage candidates and a fold split, as batches.

Configured under ``data:`` in the YAML (the sections ``collection``, ``first_stage`` and ``folds`` are those of
:class:`~rerank.data.collection.CollectionConfig`, :class:`~rerank.retrieval.FirstStageConfig` and
:class:`~rerank.data.folds.FoldsConfig`)::

    data:
      collection: {ir_datasets: disks45/nocr/trec-robust-2004, query_field: title}
      first_stage: {backend: pyserini, depth: 1000}
      folds: {scheme: robust04, test: 1}
      depth: 150            # candidates re-ranked per query (training lists are drawn from them too)
      list_size: 4
      strategy: pairs
      max_length: 512

``prepare_data`` (once per node) retrieves the first-stage run of every query and writes it to
``<output_dir>/first_stage.trec``; ``setup`` (every process) reads it and checks, before any training, that the
run and the qrels share queries and that training lists can be drawn.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from ..model import load_tokenizer
from ..retrieval import FirstStageConfig, retrieve
from .collection import Collection, CollectionConfig
from .examples import (Candidates, EvaluationBatches, ListCollator, PairCollator, ShardSampler, TrainingLists,
                       TrainingSampler, candidate_lists, trainable)
from .folds import FoldsConfig, Split, make_split
from .tokenization import PairTokenizer
from .trec import Qrels, Run, read_run, write_run

logger = logging.getLogger(__name__)


class RerankDataModule(pl.LightningDataModule):
    """Training lists, validation and test pairs for one fold of a collection.

    Args:
        collection: where documents, queries and qrels come from.
        first_stage: where the candidates come from (BM25 through pyserini or bm25s, or a run file).
        folds: the query split; validation and test use the folds that ``folds.test`` names.
        model_name: the tokenizer's model (linked from ``model.model_name`` by the CLI).
        output_dir: where the first-stage run is written (linked from ``--output_dir``).
        depth: candidates per query that are re-ranked, and that training lists are drawn from.
        list_size: candidates per training list.
        strategy: ``top``, ``random`` or ``pairs`` (see :mod:`rerank.data.examples`).
        batch_size: training lists per batch.
        repeats: visits of each training query per epoch.
        eval_batch_size: (query, candidate) pairs per evaluation batch.
        max_length: tokens per (query, document) row.
        max_query_length: cap on query tokens.
        passages: ``first`` (truncate documents) or ``maxp`` (max over overlapping passages).
        stride: passage overlap in tokens (``maxp``).
        max_passages: passages per document (``maxp``).
        num_workers: DataLoader worker processes (tokenization happens there).
        seed: seeds the training lists and their order.
    """

    def __init__(
        self,
        collection: CollectionConfig,
        first_stage: FirstStageConfig | None = None,
        folds: FoldsConfig | None = None,
        model_name: str = "bert-base-uncased",
        output_dir: str = "runs/default",
        depth: int = 100,
        list_size: int = 8,
        strategy: str = "random",
        batch_size: int = 1,
        repeats: int = 1,
        eval_batch_size: int = 64,
        max_length: int = 512,
        max_query_length: int = 64,
        passages: str = "first",
        stride: int = 64,
        max_passages: int = 4,
        num_workers: int = 0,
        seed: int = 42,
    ) -> None:
        super().__init__()
        for name, value in (("depth", depth), ("list_size", list_size), ("batch_size", batch_size),
                            ("repeats", repeats), ("eval_batch_size", eval_batch_size)):
            if value < 1:
                raise ValueError(f"data.{name} must be positive; got {value}")
        self.collection_config = collection
        self.first_stage_config = first_stage or FirstStageConfig()
        self.folds_config = folds or FoldsConfig()
        self.model_name, self.output_dir = model_name, Path(output_dir)
        self.depth, self.list_size, self.strategy = depth, list_size, strategy
        self.batch_size, self.repeats, self.eval_batch_size = batch_size, repeats, eval_batch_size
        self.tokenizer_options = {"max_length": max_length, "max_query_length": max_query_length,
                                  "passages": passages, "stride": stride, "max_passages": max_passages}
        PairTokenizer(None, **self.tokenizer_options)  # validates the options now
        self.num_workers, self.seed = num_workers, seed
        self.collection = Collection(collection)
        self.split: Split | None = None
        self.lists: dict[str, list[Candidates]] = {}
        self._evaluation: dict[str, EvaluationBatches] = {}
        self._train_sampler: TrainingSampler | None = None
        self._resume: tuple[int, int] | None = None

    @property
    def run_path(self) -> Path:
        return self.output_dir / "first_stage.trec"

    def prepare_data(self) -> None:
        """Retrieve the first-stage candidates of every query and write them to ``run_path``.

        pyserini retrieval runs in a child process: its JVM, with its own signal handlers and threads, crashes
        the PyTorch process that it shares (segmentation faults seen after training on Cranfield).
        """
        self.output_dir.mkdir(parents=True, exist_ok=True)
        arguments = (self.collection_config, self.first_stage_config, self.run_path)
        if self.first_stage_config.backend != "pyserini":
            write_first_stage_run(*arguments)
            return
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            pool.submit(write_first_stage_run, *arguments).result()

    def setup(self, stage: str | None = None) -> None:
        if self.split is not None:
            return
        qrels = self.qrels
        run = read_run(self.run_path)
        check_overlap(run, qrels, self.run_path)
        self.split = make_split(self.folds_config, qrels)
        queries = self.collection.queries
        for name in ("train", "validation", "test"):
            query_ids = getattr(self.split, name)
            self.lists[name] = candidate_lists(run, queries, qrels, query_ids, self.depth)
            if not self.lists[name]:
                raise ValueError(f"no {name} query of fold {self.folds_config.test} has first-stage candidates "
                                 f"in {self.run_path}")
        usable = [c for c in self.lists["train"] if trainable(c, self.strategy)]
        skipped = len(self.lists["train"]) - len(usable)
        if not usable:
            raise ValueError(f"none of the {len(self.lists['train'])} training queries has a relevant candidate in "
                             f"its top {self.depth} (data.depth); nothing to train on")
        if skipped:
            logger.info("%d of %d training queries have no relevant candidate in the top %d (or, for pairs, no "
                        "non-relevant one) and are not trained on", skipped, len(self.lists["train"]), self.depth)
        self.lists["train"] = usable

    @property
    def qrels(self) -> Qrels:
        return self.collection.qrels

    def judgments(self, split: str) -> Qrels:
        """The qrels of the judged queries of ``split`` (``train``, ``validation`` or ``test``)."""
        return {qid: self.qrels[qid] for qid in getattr(self.split, split) if qid in self.qrels}

    def _tokenizer(self) -> PairTokenizer:
        return PairTokenizer(load_tokenizer(self.model_name), **self.tokenizer_options)

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
                          collate_fn=ListCollator(self._tokenizer(), self.list_size),
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def _evaluation_dataloader(self, split: str) -> DataLoader:
        if split not in self._evaluation:  # sorted by document length once, not at every validation
            documents = self.collection.documents
            self._evaluation[split] = EvaluationBatches(self.lists[split], documents, self.eval_batch_size,
                                                        length=lambda doc: len(documents.text(doc)))
        dataset = self._evaluation[split]
        world, rank = self._world()
        return DataLoader(dataset, batch_size=None, sampler=ShardSampler(dataset, world, rank),
                          collate_fn=PairCollator(self._tokenizer()), num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._evaluation_dataloader("validation")

    def test_dataloader(self) -> DataLoader:
        return self._evaluation_dataloader("test")

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
