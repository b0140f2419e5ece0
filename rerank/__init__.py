"""rerank: train, evaluate and export BERT cross-encoder re-rankers with listwise ranking losses.

The public API, what the guides and the scripts use (anything else may move)::

    from rerank import train, Reranker, RerankModule, RerankDataModule, build_loss, evaluate

- :func:`train`: ``rerank fit`` from Python (the same configs and options), returning a :class:`FitResult` (the run's
  folder, its test figures, the deployed ranker and the exported model).
- :class:`Reranker`: score and re-rank with a trained (exported) model, from Python; :class:`RerankTransformer`: the
  same in a PyTerrier pipeline (the ``pyterrier`` extra); :func:`export`: a checkpoint as that folder.
- :class:`RerankModule` (``model:`` in configs), :class:`RerankDataModule` (``data:``) and the :class:`Evaluator`
  callback (``evaluation:``): the Lightning pieces that ``rerank fit`` trains and evaluates with, with their
  configuration dataclasses (:class:`CollectionConfig`, :class:`FirstStageConfig`, :class:`FoldsConfig`, ...).
- :data:`LOSSES`, :func:`build_loss`, :class:`RankingLoss`: the loss heads; :class:`CrossEncoderModel`: the model.
- :class:`Collection`, :func:`retrieve` and the run files' readers and writers; :func:`evaluate`: trec_eval's
  measures of a run by their ir_measures names; :func:`fuse`: score fusion.
- :class:`Deployment`, :func:`select_ranker`, :func:`chosen_epoch`: the deployed ranker's rule and its choices on
  validation, as a fit makes them (the studies re-apply them to a fit's saved runs).
- :func:`from_config`: the model, data module and Trainer that a command's options configure;
  :func:`resolve_config_paths`: the files a config's name stands for, :func:`config_settings`: what they set;
  :func:`run_command`: a command, in this process (``run_command("fit", [...])``).

The command line is ``rerank <command>`` (:mod:`rerank.cli`). Each name is imported on first use (PEP 562), so
``import rerank`` and the command line's help load neither torch nor Lightning.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .callbacks.evaluator import Evaluator
    from .cli import run_command
    from .cli.arguments import from_config
    from .cli.configs import config_settings, resolve_config_paths
    from .cli.fit import train
    from .clicks.interleaving import interleave
    from .clicks.models import ClickModelConfig
    from .clicks.simulator import ClickSimulationConfig
    from .clicks.targets import ClickTargetConfig, click_targets
    from .config.first_stage import FirstStageConfig
    from .config.optimizer import OptimizerSettings
    from .config.selection import SelectionRules
    from .config.teacher import TeacherConfig
    from .config.tokenization import TokenizationConfig
    from .core.figures import save_figure
    from .core.hardware import cpu_flags
    from .core.logs import configure_logging
    from .core.run_directory import CrossValidationDirectory, RunDirectory
    from .data.candidates import CandidateLists, read_candidates
    from .data.collection import Collection
    from .data.collection_config import CollectionConfig, as_collection_config
    from .data.folds import FoldsConfig, make_split
    from .data.trec import Qrels, Run, ranked, read_qrels, read_run, restrict, top_k, write_run
    from .evaluation.fusion import DEFAULT_GRID, fuse, simplex
    from .evaluation.measures import evaluate, paired_p
    from .first_stage import retrieve
    from .first_stage.bm25s_backend import search as bm25s_search
    from .inference.export import ONNX, ONNX_OUTPUT, export, export_onnx, onnx_session
    from .inference.pyterrier import RerankTransformer
    from .inference.reranker import Reranker
    from .losses import LOSSES, RankingLoss, build_loss
    from .model import speedups
    from .model.cross_encoder import CrossEncoderModel, enable_activation_checkpointing, length_chunks
    from .model.tokenization import PairInputs
    from .ranker.deployment import RANKERS, TEACHER_ALONE, Deployment, choose, resolution
    from .ranker.selection import ValidationRuns, chosen_epoch
    from .ranker.selection import select as select_ranker
    from .teacher.scores import DEFAULT_BI_ENCODER, bi_encoder_embeddings, bi_encoder_scores, blend, cosines
    from .training.batches import TrainingBatch
    from .training.budget import StepTimer
    from .training.datamodule import RerankDataModule
    from .training.fitting import FitResult
    from .training.lightning_module import RerankModule
    from .training.lists import EvaluationBatches
    from .training.optimizer import adamw

_WHERE = {
    # training, and the Lightning pieces that ``rerank fit`` trains and evaluates with
    "train": ".cli.fit",
    "FitResult": ".training.fitting",
    "RerankModule": ".training.lightning_module",
    "RerankDataModule": ".training.datamodule",
    "Evaluator": ".callbacks.evaluator",
    "TrainingBatch": ".training.batches",
    "EvaluationBatches": ".training.lists",
    "adamw": ".training.optimizer",
    "StepTimer": ".training.budget",
    # the options' dataclasses
    "CollectionConfig": ".data.collection_config",
    "as_collection_config": ".data.collection_config",
    "FirstStageConfig": ".config.first_stage",
    "FoldsConfig": ".data.folds",
    "TokenizationConfig": ".config.tokenization",
    "OptimizerSettings": ".config.optimizer",
    "SelectionRules": ".config.selection",
    "TeacherConfig": ".config.teacher",
    "ClickModelConfig": ".clicks.models",
    "ClickSimulationConfig": ".clicks.simulator",
    "ClickTargetConfig": ".clicks.targets",
    # re-ranking with a trained model: from Python, exported, in PyTerrier
    "Reranker": ".inference.reranker",
    "RerankTransformer": ".inference.pyterrier",
    "export": ".inference.export",
    "export_onnx": ".inference.export",
    "onnx_session": ".inference.export",
    "ONNX": ".inference.export",
    "ONNX_OUTPUT": ".inference.export",
    # the deployed ranker: its rule and its choice on validation
    "Deployment": ".ranker.deployment",
    "RANKERS": ".ranker.deployment",
    "TEACHER_ALONE": ".ranker.deployment",
    "choose": ".ranker.deployment",
    "resolution": ".ranker.deployment",
    "ValidationRuns": ".ranker.selection",
    "select_ranker": ".ranker.selection:select",
    "chosen_epoch": ".ranker.selection",
    # the model and its loss heads
    "CrossEncoderModel": ".model.cross_encoder",
    "enable_activation_checkpointing": ".model.cross_encoder",
    "length_chunks": ".model.cross_encoder",
    "PairInputs": ".model.tokenization",
    "LOSSES": ".losses",
    "RankingLoss": ".losses",
    "build_loss": ".losses",
    # collections, candidates and run files
    "Collection": ".data.collection",
    "make_split": ".data.folds",
    "retrieve": ".first_stage",
    "bm25s_search": ".first_stage.bm25s_backend:search",
    "CandidateLists": ".data.candidates",
    "read_candidates": ".data.candidates",
    "Run": ".data.trec",
    "Qrels": ".data.trec",
    "read_run": ".data.trec",
    "write_run": ".data.trec",
    "read_qrels": ".data.trec",
    "ranked": ".data.trec",
    "restrict": ".data.trec",
    "top_k": ".data.trec",
    # measures and score fusion
    "evaluate": ".evaluation.measures",
    "paired_p": ".evaluation.measures",
    "fuse": ".evaluation.fusion",
    "simplex": ".evaluation.fusion",
    "DEFAULT_GRID": ".evaluation.fusion",
    # the teacher
    "DEFAULT_BI_ENCODER": ".teacher.scores",
    "bi_encoder_scores": ".teacher.scores",
    "bi_encoder_embeddings": ".teacher.scores",
    "blend": ".teacher.scores",
    "cosines": ".teacher.scores",
    # clicks
    "click_targets": ".clicks.targets",
    "interleave": ".clicks.interleaving",
    # what the commands write, and the command line from Python
    "RunDirectory": ".core.run_directory",
    "CrossValidationDirectory": ".core.run_directory",
    "configure_logging": ".core.logs",
    "save_figure": ".core.figures",
    "cpu_flags": ".core.hardware",
    "from_config": ".cli.arguments",
    "resolve_config_paths": ".cli.configs",
    "config_settings": ".cli.configs",
    "run_command": ".cli",
}
"""Each public name and where it lives: a module (the name is its attribute of the same name), or
``module:attribute`` (the attribute under another name)."""
_MODULES = {"speedups": ".model.speedups"}
"""The public modules: the switches of ``model.speedups``, which benchmarks turn one by one."""

__all__ = [
    "DEFAULT_BI_ENCODER",
    "DEFAULT_GRID",
    "LOSSES",
    "ONNX",
    "ONNX_OUTPUT",
    "RANKERS",
    "TEACHER_ALONE",
    "CandidateLists",
    "ClickModelConfig",
    "ClickSimulationConfig",
    "ClickTargetConfig",
    "Collection",
    "CollectionConfig",
    "CrossEncoderModel",
    "CrossValidationDirectory",
    "Deployment",
    "EvaluationBatches",
    "Evaluator",
    "FirstStageConfig",
    "FitResult",
    "FoldsConfig",
    "OptimizerSettings",
    "PairInputs",
    "Qrels",
    "RankingLoss",
    "RerankDataModule",
    "RerankModule",
    "RerankTransformer",
    "Reranker",
    "Run",
    "RunDirectory",
    "SelectionRules",
    "StepTimer",
    "TeacherConfig",
    "TokenizationConfig",
    "TrainingBatch",
    "ValidationRuns",
    "__version__",
    "adamw",
    "as_collection_config",
    "bi_encoder_embeddings",
    "bi_encoder_scores",
    "blend",
    "bm25s_search",
    "build_loss",
    "choose",
    "chosen_epoch",
    "click_targets",
    "config_settings",
    "configure_logging",
    "cosines",
    "cpu_flags",
    "enable_activation_checkpointing",
    "evaluate",
    "export",
    "export_onnx",
    "from_config",
    "fuse",
    "interleave",
    "length_chunks",
    "make_split",
    "onnx_session",
    "paired_p",
    "ranked",
    "read_candidates",
    "read_qrels",
    "read_run",
    "resolution",
    "resolve_config_paths",
    "restrict",
    "retrieve",
    "run_command",
    "save_figure",
    "select_ranker",
    "simplex",
    "speedups",
    "top_k",
    "train",
    "write_run",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name], __name__)
    elif name in _WHERE:
        module, _, attribute = _WHERE[name].partition(":")
        value = getattr(importlib.import_module(module, __name__), attribute or name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
