"""rerank: train, evaluate and export BERT cross-encoder re-rankers with listwise ranking losses.

The public API (everything else is an implementation detail that may move)::

    from rerank import train, Reranker, RerankModule, RerankDataModule, build_loss, evaluate

- :func:`train`: ``rerank fit`` from Python (the same configs and options), returning a :class:`FitResult` (the run's
  folder, its test figures, the deployed ranker and the exported model).
- :class:`Reranker`: score and re-rank with a trained (exported) model, from Python; :class:`RerankTransformer`: the
  same in a PyTerrier pipeline (the ``pyterrier`` extra).
- :class:`RerankModule` (``model:`` in configs), :class:`RerankDataModule` (``data:``) and the :class:`Evaluator`
  callback (``evaluation:``): the Lightning pieces that ``rerank fit`` trains and evaluates with, with their
  configuration dataclasses :class:`CollectionConfig`, :class:`FirstStageConfig`, :class:`FoldsConfig`,
  :class:`TokenizationConfig`, :class:`OptimizerSettings` and :class:`SelectionRules`.
- :data:`LOSSES`, :func:`build_loss`, :class:`RankingLoss`: the loss heads.
- :func:`evaluate`: trec_eval measures of a run.
- :class:`CrossEncoderModel`: the scoring model; :class:`RunDirectory`: where ``rerank fit`` writes.
- :func:`from_config`: the model, data module and Trainer that a command's options configure;
  :func:`resolve_config_path`: a config file, or the name of a shipped one; :func:`run_command`: a command, in this
  process (``run_command("fit", [...])``).

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
    from .cli.configs import resolve_config_path
    from .cli.fit import train
    from .config.first_stage import FirstStageConfig
    from .config.optimizer import OptimizerSettings
    from .config.selection import SelectionRules
    from .config.tokenization import TokenizationConfig
    from .core.run_directory import RunDirectory
    from .data.collection_config import CollectionConfig
    from .data.folds import FoldsConfig
    from .evaluation.measures import evaluate
    from .inference.pyterrier import RerankTransformer
    from .inference.reranker import Reranker
    from .losses import LOSSES, RankingLoss, build_loss
    from .model.cross_encoder import CrossEncoderModel
    from .training.datamodule import RerankDataModule
    from .training.fitting import FitResult
    from .training.lightning_module import RerankModule

_WHERE = {
    "CrossEncoderModel": ".model.cross_encoder",
    "CollectionConfig": ".data.collection_config",
    "RerankDataModule": ".training.datamodule",
    "FoldsConfig": ".data.folds",
    "TokenizationConfig": ".config.tokenization",
    "evaluate": ".evaluation.measures",
    "FirstStageConfig": ".config.first_stage",
    "RerankModule": ".training.lightning_module",
    "Evaluator": ".callbacks.evaluator",
    "OptimizerSettings": ".config.optimizer",
    "SelectionRules": ".config.selection",
    "LOSSES": ".losses",
    "RankingLoss": ".losses",
    "build_loss": ".losses",
    "Reranker": ".inference.reranker",
    "RerankTransformer": ".inference.pyterrier",
    "RunDirectory": ".core.run_directory",
    "from_config": ".cli.arguments",
    "resolve_config_path": ".cli.configs",
    "run_command": ".cli",
    "train": ".cli.fit",
    "FitResult": ".training.fitting",
}
"""Each public name and the module it lives in."""

__all__ = [
    "LOSSES",
    "CollectionConfig",
    "CrossEncoderModel",
    "Evaluator",
    "FirstStageConfig",
    "FitResult",
    "FoldsConfig",
    "OptimizerSettings",
    "RankingLoss",
    "RerankDataModule",
    "RerankModule",
    "RerankTransformer",
    "Reranker",
    "RunDirectory",
    "SelectionRules",
    "TokenizationConfig",
    "__version__",
    "build_loss",
    "evaluate",
    "from_config",
    "resolve_config_path",
    "run_command",
    "train",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
