"""Loss heads: each maps a query's candidate scores ``[Q, N]`` and labels ``[Q, N]`` to a scalar loss.

Call every loss as ``loss(scores, labels, mask=None)`` (see :mod:`rerank.losses.base` for the rules they keep)
and build one by name with :func:`build_loss`, or name your own :class:`RankingLoss` subclass by its import path::

    >>> from rerank.losses import build_loss
    >>> loss = build_loss("smoothi_ndcg", alpha=1.0, delta=0.1)
    >>> loss = build_loss({"class_path": "rerank.losses.RankNet", "init_args": {"sigma": 2.0}})

In a config: ``model.loss: smoothi_ndcg`` with ``model.loss_args: {alpha: 1.0}``, or
``model.loss: {class_path: my_pkg.MyLoss, init_args: {...}}`` (importing ``my_pkg`` runs its code, as any
``class_path`` of a Lightning config does).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from .approx_ndcg import ApproxNDCG
from .base import RankingLoss
from .click_bce import ClickBCE
from .click_softmax import ClickSoftmax
from .distill_listnet import DistillListNet
from .distill_ranknet import DistillRankNet
from .dla import DualLearning
from .hinge import PairwiseHinge
from .lambdaloss import LambdaLoss
from .lambdarank import LambdaRank
from .listmle import ListMLE
from .listnet import ListNet
from .margin_mse import MarginMSE
from .neural_ndcg import NeuralNDCG
from .pointwise import PointwiseBCE, PointwiseMSE
from .ranknet import RankNet
from .smoothi import SmoothIAP, SmoothINDCG, SmoothIPrecision
from .softndcg import SoftNDCG

LOSSES: dict[str, type[RankingLoss]] = {
    "smoothi_ndcg": SmoothINDCG,
    "smoothi_precision": SmoothIPrecision,
    "smoothi_ap": SmoothIAP,
    "softndcg": SoftNDCG,
    "lambdarank": LambdaRank,
    "hinge": PairwiseHinge,
    "ranknet": RankNet,
    "listnet": ListNet,
    "listmle": ListMLE,
    "approx_ndcg": ApproxNDCG,
    "neural_ndcg": NeuralNDCG,
    "lambdaloss": LambdaLoss,
    "pointwise_bce": PointwiseBCE,
    "pointwise_mse": PointwiseMSE,
    "distill_listnet": DistillListNet,
    "distill_ranknet": DistillRankNet,
    "margin_mse": MarginMSE,
    "click_softmax": ClickSoftmax,
    "click_bce": ClickBCE,
    "dla": DualLearning,
}
"""Loss heads by name. The ``distill_*`` heads and ``margin_mse`` take a teacher's scores as their labels, and
``click_softmax``, ``click_bce`` and ``dla`` click targets (``RankingLoss.graded`` False); the others take graded
relevance. ``dla`` also takes the ranks the documents were shown at (``RankingLoss.needs_ranks``)."""


def build_loss(name: str | Mapping[str, Any], **kwargs: object) -> RankingLoss:
    """Build the loss registered as ``name``, or the class of ``{"class_path": ..., "init_args": {...}}``, with
    its parameters (``kwargs`` add to ``init_args``).

    Raises:
        ValueError: unknown name or class, a class that is not a :class:`RankingLoss`, unknown parameter or invalid
            parameter value; the message lists what is allowed.
    """
    cls = loss_class(name)
    label = name.get("class_path") if isinstance(name, Mapping) else name
    if isinstance(name, Mapping):
        kwargs = {**(name.get("init_args") or {}), **kwargs}
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        accepted = ", ".join(allowed) if allowed else "none"
        raise ValueError(f"loss {label!r} has no parameter {', '.join(unknown)}; it accepts: {accepted}")
    return cls(**kwargs)


def loss_class(name: str | Mapping[str, Any]) -> type[RankingLoss]:
    """The class of the loss that ``name`` (a registry name or ``{"class_path": ...}``) names.

    Raises:
        ValueError: unknown name, or a class path that cannot be imported or is not a :class:`RankingLoss`.
    """
    if isinstance(name, Mapping):
        return _import_loss(name)
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of: {', '.join(LOSSES)}, or give "
                         "{class_path: package.module.YourLoss, init_args: {...}}")
    return LOSSES[name]


def _import_loss(spec: Mapping[str, Any]) -> type[RankingLoss]:
    unknown = sorted(set(spec) - {"class_path", "init_args"})
    if unknown or not isinstance(spec.get("class_path"), str):
        raise ValueError(f"a loss given as a mapping needs class_path (and optionally init_args); got {dict(spec)}")
    module_name, _, class_name = spec["class_path"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"loss class_path {spec['class_path']!r} cannot be imported: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, RankingLoss)):
        raise ValueError(f"loss class_path {spec['class_path']!r} is not a rerank.losses.RankingLoss subclass (its "
                         "per_query or weighted_sum gets the padding and empty-query rules of rerank.losses.base)")
    return cls


__all__ = [
    "LOSSES", "ApproxNDCG", "ClickBCE", "ClickSoftmax", "DistillListNet", "DistillRankNet", "DualLearning",
    "LambdaLoss", "LambdaRank",
    "ListMLE", "ListNet", "MarginMSE", "NeuralNDCG", "PairwiseHinge", "PointwiseBCE", "PointwiseMSE", "RankNet",
    "RankingLoss", "SmoothIAP", "SmoothINDCG", "SmoothIPrecision", "SoftNDCG", "build_loss", "loss_class",
]
