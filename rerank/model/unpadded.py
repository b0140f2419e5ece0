"""Unpadded BERT cross-encoders: a batch's rows concatenated without their padding, attention over each row alone,
the [CLS] positions gathered for the head (the ``unpadded`` speed-up of :mod:`rerank.model.speedups`).

A padded batch of ``B`` rows of at most ``L`` tokens computes ``B * L`` positions in every layer, however many are
padding; MS MARCO's passages (30 to 200 tokens) waste most of them. Here the ``T`` real tokens of the batch are
one sequence ``[T, H]`` (Packed: where each row starts, ``cu_seqlens``, as FlashAttention's variable-length kernels
take them), every position-wise module (embeddings, projections, feed-forward blocks, LayerNorms) runs on ``T``
positions only, and attention runs within each row:

- on a GPU, PyTorch's variable-length attention (``torch.nn.attention.varlen.varlen_attn``, FlashAttention; no
  compiled extension);
- elsewhere (the CPU, the tests, float32 on a GPU), PyTorch's scaled dot-product attention on each row in turn: the same
  arithmetic, so the scores and gradients equal the padded model's (to float rounding).

BERT's positions restart at 0 in each row (rows are right-padded, as BERT's tokenizers pad them); the last layer is
evaluated at the [CLS] positions only (its queries one per row, its keys and values every token), which is exact
because the head reads nothing else. ``varlen_attn`` has no dropout of attention probabilities, so the speed-up
applies where that dropout is 0: evaluation, prediction, the Python API, and training with
``model.encoder_dropout: 0`` (the default recipe's); hidden-state dropout is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


@dataclass(frozen=True)
class Packed:
    """Where the real tokens of a right-padded batch are, once its rows are concatenated.

    Attributes:
        tokens: ``[T]`` indices of the real tokens in the flattened ``[B * L]`` batch, row by row.
        positions: ``[T]`` each token's position in its row (BERT's position ids).
        cu_seqlens: ``[B + 1]`` int32, where each row starts in the ``T`` tokens (and where the last ends).
        longest: the longest row.
    """

    tokens: Tensor
    positions: Tensor
    cu_seqlens: Tensor
    longest: int

    @property
    def rows(self) -> int:
        return len(self.cu_seqlens) - 1

    @property
    def firsts(self) -> Tensor:
        """``[B]``: each row's first token ([CLS]) in the ``T`` tokens."""
        return self.cu_seqlens[:-1].long()


def pack(attention_mask: Tensor) -> Packed:
    """The :class:`Packed` layout of a right-padded batch's ``[B, L]`` attention mask.

    Raises:
        ValueError: a row is padded on the left, or is empty.
    """
    mask = attention_mask.bool()
    lengths = mask.sum(dim=1)
    if (lengths == 0).any() or not bool((mask == (torch.arange(mask.shape[1], device=mask.device) <
                                                 lengths[:, None])).all()):
        raise ValueError("unpadded rows must be padded on the right and hold at least one token")
    cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    return Packed(tokens=mask.flatten().nonzero().squeeze(1), positions=(mask.cumsum(1) - 1).flatten()[
        mask.flatten()], cu_seqlens=cu_seqlens, longest=int(lengths.max()))


def varlen_attention(query: Tensor, key: Tensor, value: Tensor, cu_q: Tensor, cu_k: Tensor, max_q: int, max_k: int,
                     scale: float) -> Tensor:
    """Attention of each row's queries over that row's keys and values: ``[Tq, heads, d]`` and ``[Tk, heads, d]``
    in, ``[Tq, heads, d]`` out; rows given by ``cu_q`` and ``cu_k`` (as :attr:`Packed.cu_seqlens`). FlashAttention
    takes half precision only: float32 on a GPU (``32-true``) takes the per-row path, exact and slower."""
    if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16):
        from torch.nn.attention.varlen import varlen_attn

        if math.isclose(scale, query.shape[-1] ** -0.5):  # varlen_attn's default; PyTorch 2.11 takes no scale
            return varlen_attn(query, key, value, cu_q, cu_k, max_q, max_k)
        return varlen_attn(query, key, value, cu_q, cu_k, max_q, max_k, scale=scale)
    outputs = []
    for (q_start, q_end), (k_start, k_end) in zip(zip(cu_q.tolist(), cu_q[1:].tolist()),
                                                  zip(cu_k.tolist(), cu_k[1:].tolist())):
        q, k, v = (tensor.transpose(0, 1)[None] for tensor in (query[q_start:q_end], key[k_start:k_end],
                                                                value[k_start:k_end]))
        outputs.append(nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)[0].transpose(0, 1))
    return torch.cat(outputs)


def _layer(layer: nn.Module, hidden: Tensor, packed: Packed, cls_only: bool) -> Tensor:
    """One ``BertLayer`` on the ``[T, H]`` tokens; with ``cls_only``, its output at each row's [CLS] alone."""
    attention = layer.attention.self
    heads, size = attention.num_attention_heads, attention.attention_head_size
    queries_from = hidden[packed.firsts] if cls_only else hidden
    query = attention.query(queries_from).view(-1, heads, size)
    key, value = (projection(hidden).view(-1, heads, size) for projection in (attention.key, attention.value))
    cu_q = torch.arange(packed.rows + 1, dtype=torch.int32, device=hidden.device) if cls_only else packed.cu_seqlens
    context = varlen_attention(query, key, value, cu_q, packed.cu_seqlens, 1 if cls_only else packed.longest,
                               packed.longest, attention.scaling)
    attended = layer.attention.output(context.reshape(-1, heads * size), queries_from)
    return layer.output(layer.intermediate(attended), attended)


def unpadded_logits(model: PreTrainedModel, input_ids: Tensor, attention_mask: Tensor,
                    token_type_ids: Tensor | None = None) -> Tensor:
    """``[B, 1]`` logits of a ``BertForSequenceClassification`` on right-padded rows, computed without padding."""
    bert = model.bert
    packed = pack(attention_mask)
    types = (torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids).flatten()[packed.tokens]
    hidden = bert.embeddings(input_ids=input_ids.flatten()[packed.tokens][None], token_type_ids=types[None],
                             position_ids=packed.positions[None])[0]
    layers = bert.encoder.layer
    for index, layer in enumerate(layers):
        hidden = _layer(layer, hidden, packed, cls_only=index == len(layers) - 1)
    pooled = hidden if bert.pooler is None else bert.pooler.activation(bert.pooler.dense(hidden))
    return model.classifier(model.dropout(pooled))


def unpadded_forward(model: PreTrainedModel, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                     token_type_ids: Tensor | None = None, **_: object) -> SequenceClassifierOutput:
    """``BertForSequenceClassification.forward`` through :func:`unpadded_logits` (set on the instance)."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    return SequenceClassifierOutput(logits=unpadded_logits(model, input_ids, attention_mask, token_type_ids))


def fits(model: PreTrainedModel) -> str | None:
    """Why the unpadded path cannot stand in for ``model``'s forward (None when it can)."""
    if type(model).__name__ != "BertForSequenceClassification":
        return f"{type(model).__name__} is not a BERT sequence classifier"
    if getattr(model.config, "is_decoder", False) or getattr(model.config, "add_cross_attention", False):
        return "a decoder"
    if getattr(model.config, "position_embedding_type", "absolute") != "absolute":
        return "positions other than absolute"
    return None
