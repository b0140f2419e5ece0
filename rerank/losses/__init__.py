"""Loss heads: each maps a query's candidate scores ``[Q, N]`` and labels ``[Q, N]`` to a scalar loss.

Call every loss as ``loss(scores, labels, mask=None)`` (see :mod:`rerank.losses.base` for the rules they keep)
and build one by name with :func:`build`::

    >>> from rerank.losses import build
    >>> loss = build("smoothi_ndcg", alpha=1.0, delta=0.1)
"""

from __future__ import annotations

import inspect

from .approx_ndcg import ApproxNDCG
from .base import RankingLoss
from .hinge import PairwiseHinge
from .lambdaloss import LambdaLoss
from .lambdarank import LambdaRank
from .listmle import ListMLE
from .listnet import ListNet
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
}


def build(name: str, **kwargs: object) -> RankingLoss:
    """Build the loss registered as ``name`` with its parameters.

    Raises:
        ValueError: unknown name, unknown parameter or invalid parameter value; the message lists what is allowed.
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of: {', '.join(LOSSES)}")
    cls = LOSSES[name]
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        accepted = ", ".join(allowed) if allowed else "none"
        raise ValueError(f"loss {name!r} has no parameter {', '.join(unknown)}; it accepts: {accepted}")
    return cls(**kwargs)


__all__ = ["LOSSES", "build", "RankingLoss", *sorted(cls.__name__ for cls in LOSSES.values())]
