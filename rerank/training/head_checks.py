"""The checks that span the model and the data of a fit, made once per fit, before any work, through
:meth:`RerankModule.check_data <rerank.training.lightning_module.RerankModule.check_data>`: by ``rerank fit`` when it
has built them (with the pre-training stage's sources), and by the module when a fit starts (a fit from Python).

- the lists against the loss head (:func:`check_list_size`);
- each click source's estimator against the click head (:func:`check_click_head`).

And what the module and the data module both refuse: no model (:data:`MODEL_NAME`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..config.source import SourceConfig
from .loss_heads import LossHead

MODEL_NAME = ("model.model_name: give the model: to train, an encoder or a cross-encoder (a Hugging Face hub id or a "
              "folder, e.g. sentence-transformers/all-MiniLM-L6-v2); to re-rank, the folder rerank fit exports")
"""The error of a module or data module built without ``model.model_name`` (it has no default)."""


def click_estimators(sections: Mapping[str, Sequence[SourceConfig]]) -> dict[str, str]:
    """Each click source's place (``data.train[1]``) -> its ``clicks.estimator``, over ``{section: its sources}``."""
    return {f"{section}[{index}]": source.clicks.estimator for section, sources in sections.items()
            for index, source in enumerate(sources) if source.clicks is not None}


def check_click_head(head: LossHead, estimators: Mapping[str, str]) -> None:
    """Fail when a click source's estimator and ``model.click_loss`` disagree: ``clicks.estimator: dla`` gives naive
    targets for the ``dla`` head to debias (any other head would learn the position bias back), and the ``dla``
    head reweights naive targets by the propensities it learns (on IPS targets it would correct the bias twice).

    Args:
        head: the click head (its loss ``needs_ranks`` when it learns the propensities from the ranks, as ``dla``).
        estimators: each click source's place in the config (``data.train[1]``) -> its ``clicks.estimator``.

    Raises:
        ValueError: naming the source and both options.
    """
    name = head.name
    for where, estimator in estimators.items():
        if estimator == "dla" and not head.loss.needs_ranks:
            raise ValueError(f"{where}.clicks.estimator dla leaves the position bias to model.click_loss dla, but "
                             f"model.click_loss is {name!r}, which would learn it back; set model.click_loss: dla, "
                             "or the estimator ips")
        if estimator != "dla" and head.loss.needs_ranks:
            raise ValueError(f"model.click_loss {name!r} learns the propensities from naive click targets, but "
                             f"{where}.clicks.estimator is {estimator!r}; set {where}.clicks.estimator: dla, or "
                             "model.click_loss: click_softmax or click_bce")


def check_list_size(list_size: int, head: LossHead) -> None:
    """Fail when lists are too short for the loss head to learn anything (every loss would be 0).

    Raises:
        ValueError: naming ``data.list_size`` and ``model.loss``.
    """
    if list_size < head.loss.min_list_size:
        raise ValueError(f"data.list_size {list_size}: the loss head {head.name!r} ({head.option}) compares "
                         f"candidates within a list and needs lists of at least {head.loss.min_list_size}; every "
                         "loss would be 0 (pointwise_bce and pointwise_mse accept lists of 1)")
