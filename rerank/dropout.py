"""Dropout with cheap random masks on CPU: the same training regularization at a fraction of its CPU cost.

PyTorch's CPU dropout draws one Bernoulli sample per element (``bernoulli_``), and in BERT training most
elements are attention probabilities (``[B, heads, L, L]`` per layer): on this project's 2-core machine that
draw alone is about a fifth of a MiniLM training step (``docs/benchmarks.md``). Here one 64-bit random word
gives four 15-bit uniform integers ``u`` (the low 15 bits of each 16-bit part), and an element is kept when
``u >= round(p * 2^15)``: Bernoulli dropout with probability ``p' = round(p * 2^15) / 2^15`` (within 1.6e-5 of
``p``; 0.1 becomes 0.1000061), kept elements scaled by ``1 / (1 - p')`` so that expectations are unchanged
(Srivastava et al., JMLR 2014, Eq. 1 with inverted scaling). Masks come from PyTorch's CPU generator, so
``torch.manual_seed`` and gradient checkpointing (which restores the RNG state before recomputing) reproduce
them. On other devices, and outside training, :func:`fast_dropout` is ``torch.nn.functional.dropout``.

:func:`use_fast_dropout` puts it into a Hugging Face encoder: its ``nn.Dropout`` modules become
:class:`FastDropout`, and its attention becomes :func:`attention`, registered with ``transformers`` as
``rerank_sdpa``: scaled dot-product attention, computed as PyTorch's own math path does when dropout is on
(``softmax(Q K^T * scale + mask)``, dropout, ``@ V``), and PyTorch's fused ``scaled_dot_product_attention``
otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "rerank_sdpa"
_LEVELS = 2**15


def dropout_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[Tensor, float]:
    """A bool keep-mask of ``shape`` (True with probability ``1 - p'``) and the scale ``1 / (1 - p')``."""
    threshold = round(p * _LEVELS)
    count = shape.numel()
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_()  # 63 random bits each
    uniform = words.view(torch.int16)[:count].bitwise_and_(_LEVELS - 1)  # 15 random bits per 16-bit part
    return uniform.ge(threshold).view(shape), _LEVELS / (_LEVELS - threshold)


def fast_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout; on CPU in training, with the cheap masks of :func:`dropout_mask`."""
    if not training or p == 0.0 or x.device.type != "cpu":
        return nn.functional.dropout(x, p, training)
    if p >= 1.0:
        return x * 0.0
    keep, scale = dropout_mask(x.shape, p, x.device)
    return torch.where(keep, x, 0.0).mul_(scale)


class FastDropout(nn.Dropout):
    """``nn.Dropout`` whose CPU training masks come from :func:`dropout_mask`."""

    def forward(self, x: Tensor) -> Tensor:
        return fast_dropout(x, self.p, self.training)


def attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
              dropout: float = 0.0, scaling: float | None = None, **kwargs: object) -> tuple[Tensor, None]:
    """A ``transformers`` attention function (``[B, heads, L, d]`` in, ``[B, L, heads, d]`` out): PyTorch's
    scaled dot-product attention, with the attention-probability dropout of :func:`fast_dropout` on CPU."""
    if dropout == 0.0 or query.device.type != "cpu":
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scores = (query @ key.transpose(-1, -2)).mul_(query.shape[-1] ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        scores = (scores.masked_fill_(~attention_mask, torch.finfo(scores.dtype).min)
                  if attention_mask.dtype == torch.bool else scores.add_(attention_mask))
    probabilities = fast_dropout(scores.softmax(dim=-1), dropout, True)
    return (probabilities @ value).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def use_fast_dropout(model: PreTrainedModel) -> None:
    """Give ``model`` :class:`FastDropout` modules and, when it uses SDPA attention, :func:`attention`."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, FastDropout(child.p, child.inplace))
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(ATTENTION)
