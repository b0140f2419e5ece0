"""rerank: train, evaluate and export BERT cross-encoder re-rankers with listwise ranking losses.

The public API (everything else is an implementation detail that may move)::

    from rerank import Reranker, RerankModule, RerankDataModule, build, evaluate

- :class:`Reranker`: score and re-rank with a trained (exported) model, from Python.
- :class:`RerankModule` (``model:`` in configs) and :class:`RerankDataModule` (``data:``): the Lightning pieces
  that ``rerank fit`` trains, with their configuration dataclasses :class:`CollectionConfig`,
  :class:`FirstStageConfig`, :class:`FoldsConfig` and :class:`TokenizationConfig`.
- :data:`LOSSES`, :func:`build`, :class:`RankingLoss`: the loss heads.
- :func:`evaluate`: trec_eval measures of a run.
- :class:`CrossEncoderModel`: the scoring model; :class:`RunDirectory`: where ``rerank fit`` writes.

The command line is ``rerank <command>`` (:mod:`rerank.cli`). Each name is imported on first use (PEP 562), so
``import rerank`` and the command line's help load neither torch nor Lightning.

Modules that moved when the code was laid out floor by floor (docs/development.md) keep their old names working,
with a ``FutureWarning`` that gives the new one (:data:`MOVED`): ``import rerank.lightning_module`` still gives
``RerankModule``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .data.collection import CollectionConfig
    from .data.folds import FoldsConfig
    from .evaluation import evaluate
    from .first_stage.config import FirstStageConfig
    from .losses import LOSSES, RankingLoss, build
    from .model.cross_encoder import CrossEncoderModel
    from .model.tokenization import TokenizationConfig
    from .reranker import Reranker
    from .run_directory import RunDirectory
    from .training.datamodule import RerankDataModule
    from .training.lightning_module import RerankModule

__version__ = "0.2.0"

_WHERE = {
    "CrossEncoderModel": ".model.cross_encoder",
    "CollectionConfig": ".data.collection",
    "RerankDataModule": ".training.datamodule",
    "FoldsConfig": ".data.folds",
    "TokenizationConfig": ".model.tokenization",
    "evaluate": ".evaluation",
    "FirstStageConfig": ".first_stage.config",
    "RerankModule": ".training.lightning_module",
    "LOSSES": ".losses",
    "RankingLoss": ".losses",
    "build": ".losses",
    "Reranker": ".reranker",
    "RunDirectory": ".run_directory",
}
"""Each public name and the module it lives in."""

__all__ = [
    "LOSSES",
    "CollectionConfig",
    "CrossEncoderModel",
    "FirstStageConfig",
    "FoldsConfig",
    "RankingLoss",
    "RerankDataModule",
    "RerankModule",
    "Reranker",
    "RunDirectory",
    "TokenizationConfig",
    "__version__",
    "build",
    "evaluate",
]


MOVED = {
    "rerank.cross_encoder": "rerank.model.cross_encoder",
    "rerank.speedups": "rerank.model.speedups",
    "rerank.data.tokenization": "rerank.model.tokenization",
    "rerank.data.datamodule": "rerank.training.datamodule",
    "rerank.data.sources": "rerank.training.sources",
    "rerank.data.examples": "rerank.training.examples",
    "rerank.data.batches": "rerank.training.batches",
    "rerank.lightning_module": "rerank.training.lightning_module",
    "rerank.pretraining": "rerank.training.pretraining",
    "rerank.prediction_writer": "rerank.training.prediction_writer",
    "rerank.checkpoint_io": "rerank.training.checkpoint_io",
    "rerank.progress": "rerank.training.progress",
    "rerank.precision": "rerank.training.precision",
}
"""The former name of each module that moved -> its name now."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module by its former name (a module that forwards every attribute to the new one), saying
    where it is now."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        now = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} is now {now}: import it from there (the old name goes in a later release)",
                      FutureWarning, stacklevel=2)
        target = importlib.import_module(now)
        module.__getattr__ = lambda name: getattr(target, name)  # PEP 562: `from old import X` asks it too


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
