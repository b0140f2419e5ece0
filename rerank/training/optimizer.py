"""The optimizer of a fit: AdamW (Loshchilov and Hutter, ICLR 2019) with one learning rate for the encoder and one for
the head, a linear warmup then a linear decay (``model.optimizer``: :class:`OptimizerSettings`), and two speed-ups
behind ``model.speedups``.

- ``fused_adamw``: PyTorch's fused AdamW kernel (one kernel for every parameter's update, ``fused=True``; on a GPU,
  and on the CPU in recent PyTorch) instead of one loop of operations per parameter tensor.
- ``bf16_weights``: the model's weights held in bfloat16 between steps, so that under ``bf16-mixed`` autocast no
  longer casts every float32 weight to bfloat16 at every forward pass (a tenth of a BERT step on a GPU:
  docs/experiments/benchmarks.md); the update is made on float32 master copies that the optimizer keeps
  (:class:`MasterWeightsAdamW`, as mixed-precision training keeps them: Micikevicius et al., ICLR 2018), each
  step's gradients cast up to them and the updated masters cast down to the model once a step. Gradients are
  accumulated in bfloat16 (``trainer.accumulate_grad_batches``), and a run resumed from a checkpoint takes its masters
  from the bfloat16 weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from transformers import get_linear_schedule_with_warmup

from ..config.optimizer import OptimizerSettings


def param_groups(model: torch.nn.Module, head: Iterable[torch.nn.Parameter], loss_heads: Iterable[Any],
                 settings: OptimizerSettings) -> list[dict[str, Any]]:
    """AdamW's parameter groups: ``model``'s trainable parameters at the encoder's learning rate, but those of
    ``head`` at the head's, with ``settings.weight_decay`` on matrices only (none on biases and LayerNorm weights);
    then the parameters of each loss head that has some (``dla``'s propensities), at its own ``lr`` or the head's."""
    in_head = {id(parameter) for parameter in head}
    groups: dict[tuple[float, float], list[torch.nn.Parameter]] = {}
    for parameter in model.parameters():
        if parameter.requires_grad:
            lr = settings.head_lr if id(parameter) in in_head else settings.encoder_lr
            decay = settings.weight_decay if parameter.ndim > 1 else 0.0
            groups.setdefault((lr, decay), []).append(parameter)
    found = [{"params": params, "lr": lr, "weight_decay": decay} for (lr, decay), params in groups.items()]
    for loss_head in loss_heads:
        if any(True for _ in loss_head.parameters()):
            lr = loss_head.lr if loss_head.lr is not None else settings.head_lr
            found.append({"params": list(loss_head.parameters()), "lr": lr, "weight_decay": 0.0})
    return found


def linear_schedule(optimizer: torch.optim.Optimizer, settings: OptimizerSettings,
                    total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning rates warmed up linearly over ``settings.warmup`` (a fraction of ``total_steps``, or steps),
    then decayed linearly to 0 at ``total_steps``."""
    warmup = settings.warmup
    warmup_steps = round(warmup * total_steps) if warmup < 1 else int(warmup)
    return get_linear_schedule_with_warmup(optimizer, warmup_steps, max(total_steps, 1))


def adamw(param_groups: Iterable[dict[str, Any]], speedups: Sequence[str]) -> torch.optim.Optimizer:
    """AdamW over ``param_groups``, with the optimizer's speed-ups among ``speedups``."""
    fused = True if "fused_adamw" in speedups else None
    if "bf16_weights" in speedups:
        return MasterWeightsAdamW(param_groups, fused=fused)
    return torch.optim.AdamW(param_groups, fused=fused)


class MasterWeightsAdamW(torch.optim.AdamW):
    """AdamW that updates float32 master copies of bfloat16 (or float16) parameters, and casts them back once a
    step. Its parameter groups hold the masters; :attr:`models` the parameters the model computes with."""

    def __init__(self, param_groups: Iterable[dict[str, Any]], **options: Any) -> None:
        groups = [dict(group) for group in param_groups]
        self.models: list[list[torch.nn.Parameter]] = [list(group["params"]) for group in groups]
        for group, parameters in zip(groups, self.models):
            group["params"] = [torch.nn.Parameter(parameter.detach().float().clone()) for parameter in parameters]
        super().__init__(groups, **options)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, parameters in zip(self.param_groups, self.models):
            for master, parameter in zip(group["params"], parameters):
                master.grad = None if parameter.grad is None else parameter.grad.float()
        super().step()
        for group, parameters in zip(self.param_groups, self.models):
            for master, parameter in zip(group["params"], parameters):
                parameter.copy_(master)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for parameters in self.models:
            for parameter in parameters:
                if set_to_none:
                    parameter.grad = None
                elif parameter.grad is not None:
                    parameter.grad.zero_()
