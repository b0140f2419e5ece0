"""How a fit chooses what it deploys: :class:`SelectionRules` (``evaluation.selection`` in the YAML). The choice
itself is :func:`rerank.ranker.selection.select`'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..evaluation.fusion import DEFAULT_GRID

RANKERS = ("reranker", "interpolated", "fused")
"""The rankers a fit can deploy, simplest first (the order that breaks ties)."""
CHECKS = ("one_se", "cross_fit")
"""How ``deploy: auto`` checks its choice against the teacher alone (:class:`SelectionRules`)."""
EPOCHS = ("one_se", "best")
"""How a fit chooses the checkpoint it tests (:class:`SelectionRules`, :func:`chosen_epoch`)."""


@dataclass(frozen=True)
class SelectionRules:
    """How a fit chooses what it deploys: ``evaluation.selection`` in the YAML
    (:mod:`rerank.callbacks.evaluator`).

    Attributes:
        measure: the validation measure every choice is made on (the checkpoint too).
        interpolate: whether the fusions (``interpolated``; ``fused`` with a teacher) are searched at all.
        grid: the weights ``w`` tried for ``interpolated``.
        deploy: ``auto`` (the rule) or the ranker to deploy whatever validation says: ``reranker``,
            ``interpolated`` or ``fused`` (the fusions need ``interpolate: true``; ``fused`` a bi-encoder teacher).
        check: how ``auto`` keeps its choice over the teacher alone: ``one_se``, the choice beats it by one standard
            error on the queries it was chosen on; ``cross_fit``, the search beats it on queries it did not see
            (:func:`cross_fitted`).
        epoch: which validated weights the fit tests, deploys and exports (:func:`chosen_epoch`): ``one_se``, the
            last unless the best beats them by one standard error; ``best``, the highest figure.

    Raises:
        ValueError: ``deploy``, ``check`` or ``epoch`` unknown, or a fusion without ``interpolate``.
    """

    measure: str = "nDCG@20"
    interpolate: bool = False
    grid: Sequence[float] = DEFAULT_GRID
    deploy: str = "auto"
    check: str = "one_se"
    epoch: str = "one_se"

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(f"evaluation.selection.check must be one of {', '.join(CHECKS)}; got {self.check!r}")
        if self.epoch not in EPOCHS:
            raise ValueError(f"evaluation.selection.epoch must be one of {', '.join(EPOCHS)}; got {self.epoch!r}")
        if self.deploy not in ("auto", *RANKERS):
            raise ValueError(f"evaluation.selection.deploy must be auto or one of {', '.join(RANKERS)}; "
                             f"got {self.deploy!r}")
        if self.deploy in ("interpolated", "fused") and not self.interpolate:
            raise ValueError(f"evaluation.selection.deploy {self.deploy} is a fusion, measured only with "
                             "evaluation.selection.interpolate: true")
