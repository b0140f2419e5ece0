"""AdamW's settings: :class:`OptimizerSettings` (``model.optimizer`` in the YAML; a stage's ``pretrain.optimizer``
gives the ones it changes). The optimizer they build is :mod:`rerank.training.optimizer`'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.checks import check_range


@dataclass(frozen=True)
class OptimizerSettings:
    """AdamW's settings: ``model.optimizer`` in the YAML.

    Attributes:
        encoder_lr: the encoder's learning rate.
        head_lr: the classification head's (and a loss head's own parameters', ``dla``'s, unless it sets its own).
        weight_decay: AdamW's weight decay, not applied to biases and LayerNorm weights.
        warmup: a linear warmup, as a fraction of all optimizer steps (< 1) or a number of steps; then a linear decay
            to 0.

    Raises:
        ValueError: a learning rate not above 0, or a negative warmup or weight decay, naming it.
    """

    encoder_lr: float = 2e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.1

    def __post_init__(self) -> None:
        check_settings(dataclasses.asdict(self), "model.optimizer")


def check_settings(settings: Mapping[str, float], option: str) -> None:
    """Each of ``settings`` (some of :class:`OptimizerSettings`' attributes) a known one and in its range.

    Raises:
        ValueError: naming ``option.<attribute>``: unknown, a learning rate not above 0, or a negative warmup or
            weight decay.
    """
    known = [setting.name for setting in dataclasses.fields(OptimizerSettings)]
    for name, value in settings.items():
        if name not in known:
            raise ValueError(f"{option}.{name}: not a setting of the optimizer; give one of {', '.join(known)}")
        if name.endswith("_lr"):
            check_range(f"{option}.{name}", value, above=0)
        else:
            check_range(f"{option}.{name}", value, 0)
