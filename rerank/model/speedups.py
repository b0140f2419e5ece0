"""Speed-ups for BERT-style cross-encoders, switched on explicitly (``model.speedups``) and undone before export.

None of them changes what the model computes; each is checked before it is applied, and a model whose
``transformers`` version or layer attributes do not match keeps its stock modules (with a warning):

- ``unpadded`` (exact, to float rounding): the batch's rows concatenated without padding, attention within each
  row (variable-length attention on a GPU), the [CLS] positions gathered for the head (:mod:`rerank.model.unpadded`:
  what it does, and where it applies). The model's ``forward`` is replaced on the instance.
- ``compiled`` (exact, to float rounding): ``torch.compile`` (dynamic shapes) of each layer's position-wise blocks,
  the attention's output projection with its residual and LayerNorm, the feed-forward block with its GELU, bias and
  LayerNorm: their chains of elementwise operations fused into few kernels, whatever path (padded or unpadded) calls
  them. The first batches compile (tens of seconds; a new length may recompile).
- ``fused_adamw`` and ``bf16_weights``: the optimizer's (:mod:`rerank.training.optimizer`).

- ``cls_only_last_layer`` (exact): the head reads the [CLS] vector only, so BERT's last layer is evaluated at
  the [CLS] position only. Its keys and values still come from every token, so the [CLS] output is unchanged,
  but the query projection, the attention output, the feed-forward block and their gradients are computed for
  one row instead of all (about a sixth less compute for a 6-layer encoder). The layer's ``forward`` is
  replaced on the instance: parameters, state dicts and saved folders stay those of the standard model.
- ``cheap_dropout`` (the same distribution): PyTorch's CPU dropout draws one Bernoulli sample per element
  (``bernoulli_``), and in BERT training most elements are attention probabilities (``[B, heads, L, L]`` per
  layer): on a 2-core machine that draw alone is about a fifth of a MiniLM training step. Here one 64-bit random
  word gives four 15-bit uniform integers ``u`` (the low 15 bits of each 16-bit part), and an element is kept
  when ``u >= round(p * 2^15)``: Bernoulli dropout with probability ``p' = round(p * 2^15) / 2^15`` (within
  1.6e-5 of ``p``; 0.1 becomes 0.1000061), kept elements scaled by ``1 / (1 - p')`` so that expectations are
  unchanged (Srivastava et al., JMLR 2014, Eq. 1 with inverted scaling). Masks come from PyTorch's CPU
  generator, so ``torch.manual_seed`` and gradient checkpointing (which restores the RNG state before
  recomputing) reproduce them. On other devices, and outside training, it is ``torch.nn.functional.dropout``.
  The model's ``nn.Dropout`` modules become :class:`FastDropout`, and its SDPA attention becomes
  :func:`attention`, registered with ``transformers`` as ``rerank_sdpa`` when first enabled (never at import):
  PyTorch's math path (``softmax(Q K^T * scale + mask)``, dropout, ``@ V``) with these masks when dropout is
  on, PyTorch's fused ``scaled_dot_product_attention`` otherwise.

``model.speedups: auto`` enables the last two in training (:data:`AUTO`); ``off`` keeps the stock modules; a list
names those to enable (``[cls_only_last_layer, cheap_dropout, unpadded]``). :class:`~rerank.model.scorer.PairScorer`
enables the exact ones it is given (the [CLS]-only layer by default); :func:`disable` restores the stock modules
(before an ONNX export).
"""

from __future__ import annotations

import logging
import types
from collections.abc import Sequence
from importlib.metadata import version

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from .unpadded import fits, unpadded_forward

logger = logging.getLogger(__name__)

SPEEDUPS = ("cls_only_last_layer", "cheap_dropout", "unpadded", "compiled", "fused_adamw", "bf16_weights")
"""Every speed-up, in the order applied (the last two are the optimizer's: :mod:`rerank.training.optimizer`)."""
OPTIMIZER = ("fused_adamw", "bf16_weights")
"""The speed-ups of the optimizer step, which :func:`enable` only checks (the training module applies them)."""
AUTO = ("cls_only_last_layer", "cheap_dropout")
"""``model.speedups: auto``: those measured faster on the CPU (docs/experiments/benchmarks.md). ``unpadded`` is not
among them: on a GPU it was faster only with many short rows a step (``scripts/benchmarks/bench_gpu.py`` part 7)."""
AUTO_ON_GPU = ("fused_adamw",)
"""What ``auto`` adds on a GPU (:func:`for_accelerator`): ``fused_adamw``, exact, and faster than AdamW's default
in every workload of ``scripts/benchmarks/bench_gpu.py`` part 7 (BERT-base on an H200: 990 against 964 sequences/s at
512 tokens, 1,675 against 1,345 at MS MARCO's lengths). The other GPU levers stay opt-in (docs/training.md)."""
MODES = ("auto", "off")
COMPILE_BACKEND = "inductor"
"""``torch.compile``'s backend for ``compiled`` (``scripts/benchmarks/bench_gpu.py --dry-run`` sets ``aot_eager``:
traced and differentiated, no code generated)."""
ATTENTION = "rerank_sdpa"
MIN_TRANSFORMERS = (5, 0)
"""The oldest ``transformers`` whose attention interfaces and BERT layer these speed-ups were checked against (4.57's
BERT has its own attention classes, without the ``scaling`` the [CLS]-only layer reads)."""
_LEVELS = 2**15
_SELF_ATTENTION = ("query", "key", "value", "num_attention_heads", "attention_head_size", "scaling", "dropout")


def _transformers_supported() -> bool:
    parts = version("transformers").split(".")[:2]
    return tuple(int(part) for part in parts if part.isdigit()) >= MIN_TRANSFORMERS


def resolve(speedups: str | Sequence[str]) -> tuple[str, ...]:
    """The names that a ``model.speedups`` value enables (``auto``: :data:`AUTO`; ``off``: none).

    Raises:
        ValueError: a value or name that is none of these.
    """
    if isinstance(speedups, str):
        if speedups not in MODES:
            raise ValueError(f"model.speedups must be auto, off or a list of {', '.join(SPEEDUPS)}; got {speedups!r}")
        return AUTO if speedups == "auto" else ()
    unknown = [name for name in speedups if name not in SPEEDUPS]
    if unknown:
        raise ValueError(f"model.speedups: unknown {', '.join(map(repr, unknown))}; known: {', '.join(SPEEDUPS)}")
    return tuple(name for name in SPEEDUPS if name in speedups)


def for_accelerator(speedups: str | Sequence[str], accelerator: object) -> tuple[str, ...]:
    """The names that a ``model.speedups`` value enables on ``accelerator`` (``trainer.accelerator``): with ``auto``,
    :data:`AUTO`, and on a GPU :data:`AUTO_ON_GPU` too; else as :func:`resolve` gives them.

    Raises:
        ValueError: a value or name that is none of these.
    """
    names = resolve(speedups)
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    extra = AUTO_ON_GPU if speedups == "auto" and gpu else ()
    return tuple(name for name in SPEEDUPS if name in names or name in extra)


def enable(model: PreTrainedModel, names: Sequence[str] = AUTO) -> list[str]:
    """Apply the speed-ups ``names`` that fit ``model``; the names of those applied (see the module docstring)."""
    if not _transformers_supported():
        logger.warning("speed-ups off: transformers %s is older than %s", version("transformers"),
                       ".".join(map(str, MIN_TRANSFORMERS)))
        return []
    apply = {"cls_only_last_layer": _cls_only_last_layer, "cheap_dropout": _cheap_dropout, "unpadded": _unpadded,
             "compiled": _compiled, "fused_adamw": lambda _: True, "bf16_weights": lambda _: True}
    return [name for name in SPEEDUPS if name in names and apply[name](model)]


def disable(model: PreTrainedModel) -> None:
    """Restore the stock modules that :func:`enable` replaced."""
    if "forward" in vars(model):
        del model.forward
    for block in position_wise(model):
        block._compiled_call_impl = None  # nn.Module.compile's, undone
    layer = _last_bert_layer(model)
    if layer is not None and "forward" in vars(layer):
        del layer.forward
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is FastDropout:
                setattr(module, name, nn.Dropout(child.p, child.inplace).train(child.training))
    if model.config._attn_implementation == ATTENTION:
        model.set_attn_implementation("sdpa")


# the last layer at [CLS] only ---------------------------------------------------------------------------------

def _last_bert_layer(model: PreTrainedModel) -> nn.Module | None:
    encoder = getattr(model.base_model, "encoder", None)
    layers = getattr(encoder, "layer", None)
    return layers[-1] if layers is not None and len(layers) else None


def _cls_only_last_layer(model: PreTrainedModel) -> bool:
    if type(model).__name__ != "BertForSequenceClassification":
        return False
    layer = _last_bert_layer(model)
    attention = getattr(getattr(layer, "attention", None), "self", None)
    required = (attention is not None and all(hasattr(attention, name) for name in _SELF_ATTENTION)
                and all(hasattr(layer, name) for name in ("intermediate", "output"))
                and hasattr(layer.attention, "output") and not getattr(layer, "add_cross_attention", False))
    if not required:
        logger.warning("speed-up cls_only_last_layer off: %s's last layer lacks the expected attributes",
                       type(model).__name__)
        return False
    layer.forward = types.MethodType(_cls_only_forward, layer)
    return True


def _cls_only_forward(layer: nn.Module, hidden_states: Tensor, attention_mask: Tensor | None = None,
                      *args: object, **kwargs: object) -> Tensor:
    """``BertLayer.forward`` for the first position only: ``[B, L, H]`` -> ``[B, 1, H]``."""
    attention = layer.attention.self
    batch = hidden_states.shape[0]
    heads = (batch, -1, attention.num_attention_heads, attention.attention_head_size)
    cls = hidden_states[:, :1]
    query = attention.query(cls).view(heads).transpose(1, 2)
    key = attention.key(hidden_states).view(heads).transpose(1, 2)
    value = attention.value(hidden_states).view(heads).transpose(1, 2)
    if attention_mask is not None and attention_mask.dim() == 4:
        attention_mask = attention_mask[:, :, :1]
    context, _ = attention_function(attention, query, key, value, attention_mask, scaling=attention.scaling,
                                    dropout=attention.dropout.p if layer.training else 0.0)
    attended = layer.attention.output(context.reshape(batch, 1, -1), cls)
    return layer.output(layer.intermediate(attended), attended)


# compiled position-wise blocks ----------------------------------------------------------------------------------

def position_wise(model: PreTrainedModel) -> list[nn.Module]:
    """Each BERT layer's attention output block, intermediate block and output block (empty for other models)."""
    encoder = getattr(model.base_model, "encoder", None)
    return [block for layer in getattr(encoder, "layer", []) for block in
            (getattr(getattr(layer, "attention", None), "output", None), getattr(layer, "intermediate", None),
             getattr(layer, "output", None)) if block is not None]


def _compiled(model: PreTrainedModel) -> bool:
    blocks = position_wise(model)
    if not blocks:
        logger.warning("speed-up compiled off: %s has no BERT layers", type(model).__name__)
        return False
    for block in blocks:
        block.compile(dynamic=True, backend=COMPILE_BACKEND)
    return True


# unpadded rows --------------------------------------------------------------------------------------------------

def _unpadded(model: PreTrainedModel) -> bool:
    why = fits(model)
    if why is None and model.config.attention_probs_dropout_prob > 0:
        why = (f"its attention dropout is {model.config.attention_probs_dropout_prob} (variable-length attention has "
               "none; model.encoder_dropout: 0 turns it off)")
    if why is not None:
        logger.warning("speed-up unpadded off: %s", why)
        return False
    model.forward = types.MethodType(unpadded_forward, model)
    return True


# cheap dropout masks ------------------------------------------------------------------------------------------

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


def attention_function(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                       dropout: float = 0.0, scaling: float | None = None, **kwargs: object) -> tuple[Tensor, None]:
    """A ``transformers`` attention function (``[B, heads, L, d]`` in, ``[B, L, heads, d]`` out): PyTorch's
    scaled dot-product attention, with the attention-probability dropout of :func:`fast_dropout` on CPU."""
    if dropout == 0.0 or query.device.type != "cpu":
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scores = (query @ key.transpose(-1, -2)).mul_(query.shape[-1] ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        scores = (scores.masked_fill_(~attention_mask, torch.finfo(scores.dtype).min)
                  if attention_mask.dtype == torch.bool else scores.add_(attention_mask))
    probabilities = fast_dropout(scores.softmax(dim=-1), dropout, True)
    return (probabilities @ value).transpose(1, 2).contiguous(), None


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, attention_function)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def _cheap_dropout(model: PreTrainedModel) -> bool:
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, FastDropout(child.p, child.inplace).train(child.training))
    if model.config._attn_implementation == "sdpa":
        _register_attention()
        model.set_attn_implementation(ATTENTION)
    return True
