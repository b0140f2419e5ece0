"""The cross-encoder: ``[CLS] query [SEP] document [SEP]`` -> encoder -> [CLS] head -> one relevance score.

The model is a Hugging Face sequence-classification model with one label
(``AutoModelForSequenceClassification(num_labels=1)``): for BERT-style encoders its head is the [CLS] vector
through BERT's pooler, dropout and a linear layer; other architectures bring their own [CLS] head (ELECTRA's
dense-GELU-linear, for instance). Keeping the library's own classes means that:

- any encoder loads by hub id or local path (``bert-base-uncased``, ``google/electra-base-discriminator``,
  ``sentence-transformers/all-MiniLM-L6-v2``), with a freshly initialised head;
- an existing sequence-classification cross-encoder (``cross-encoder/ms-marco-MiniLM-L-6-v2``) keeps its
  trained head;
- a trained model saves to a folder that ``transformers`` and ``sentence_transformers.CrossEncoder`` load as is.

Two changes make training cheaper without changing the model: BERT's last layer is evaluated at [CLS] only,
and dropout masks on CPU are drawn by :mod:`rerank.dropout`.

Example::

    >>> model = CrossEncoder.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> scores = model(**model.tokenizer(["a query"], ["a document"], return_tensors="pt"))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

from .dropout import attention as fast_dropout_attention
from .dropout import use_fast_dropout

logger = logging.getLogger(__name__)


class CrossEncoder(nn.Module):
    """A sequence-classification model with one output, scoring (query, document) pairs."""

    def __init__(self, model: PreTrainedModel, tokenizer=None) -> None:  # noqa: ANN001 - any HF tokenizer
        super().__init__()
        if model.config.num_labels != 1:
            raise ValueError(f"a cross-encoder has one output; this model has num_labels={model.config.num_labels}")
        self.model = model
        self.tokenizer = tokenizer
        use_fast_dropout(model)
        _cls_only_last_layer(model)

    @classmethod
    def from_pretrained(
        cls, name_or_path: str, dropout: float | None = None, gradient_checkpointing: bool = False
    ) -> CrossEncoder:
        """Load an encoder (new head) or a one-label sequence-classification model (its trained head kept).

        Args:
            name_or_path: a Hugging Face hub id (from the local cache when offline) or a local folder.
            dropout: the classifier dropout (default: the model config's).
            gradient_checkpointing: trade compute for memory in the encoder's backward pass.

        Raises:
            OSError: the model is neither a local folder nor in the Hugging Face cache (offline), with the id.
        """
        with _explained(name_or_path):
            config = AutoConfig.from_pretrained(name_or_path)
        trained_head = bool(config.architectures) and any(
            name.endswith("ForSequenceClassification") for name in config.architectures
        ) and config.num_labels == 1
        config.num_labels = 1
        if dropout is not None:
            config.classifier_dropout = dropout
        model = AutoModelForSequenceClassification.from_pretrained(name_or_path, config=config)
        if not trained_head:
            logger.info("%s: a new one-output head on the [CLS] vector", name_or_path)
            _identity_pooler(model)
        if gradient_checkpointing:  # renamed activation_checkpointing_enable in recent transformers
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
        return cls(model, load_tokenizer(name_or_path))

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None,
                chunk_size: int | None = None) -> Tensor:
        """``[B]`` scores of B tokenized (right-padded) pairs.

        With ``chunk_size``, the rows are sorted by length and encoded ``chunk_size`` at a time, each chunk cut to
        its own longest row: less compute spent on padding, and a smaller activation peak per forward.
        """
        if chunk_size is None or input_ids.shape[0] <= chunk_size:
            return self._scores(input_ids, attention_mask, token_type_ids)
        chunks = length_chunks(attention_mask, chunk_size)
        scores = [self._scores(input_ids[rows, :width], attention_mask[rows, :width],
                               None if token_type_ids is None else token_type_ids[rows, :width])
                  for rows, width in chunks]
        return torch.cat(scores)[torch.cat([rows for rows, _ in chunks]).argsort()]

    def _scores(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None) -> Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        return self.model(**inputs).logits.squeeze(-1)

    def head_parameters(self) -> list[nn.Parameter]:
        """The parameters of the classification head (everything outside the base encoder)."""
        encoder = {id(p) for p in self.model.base_model.parameters()}
        return [p for p in self.model.parameters() if id(p) not in encoder]

    def encoder_parameters(self) -> list[nn.Parameter]:
        """The parameters of the base encoder."""
        return list(self.model.base_model.parameters())

    def save_pretrained(self, folder: str) -> None:
        """Save model and tokenizer in the Hugging Face layout (``model.safetensors``, config, tokenizer)."""
        self.model.save_pretrained(folder, safe_serialization=True)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(folder)


def max_over_passages(row_scores: Tensor, pair_of_row: Tensor, pairs: int) -> Tensor:
    """MaxP (Dai and Callan, SIGIR 2019): the score of each of ``pairs`` (query, document) pairs is the maximum
    over its passages' rows; ``pair_of_row[i]`` is the pair of row ``i``. Differentiable (the gradient reaches
    each pair's best row)."""
    return row_scores.new_full((pairs,), float("-inf")).scatter_reduce(
        0, pair_of_row, row_scores, "amax", include_self=False)


def length_chunks(attention_mask: Tensor, chunk_size: int) -> list[tuple[Tensor, int]]:
    """Rows sorted by length (real tokens), ``chunk_size`` at a time, with each chunk's longest length."""
    lengths = attention_mask.sum(dim=1)
    order = lengths.argsort(stable=True)
    return [(rows, int(lengths[rows].max())) for rows in order.split(chunk_size)]


def _cls_only_last_layer(model: PreTrainedModel) -> None:
    """Evaluate BERT's last layer at the [CLS] position only: the head reads nothing else.

    Its keys and values still come from every token, so the [CLS] output is unchanged, but the query
    projection, the attention output, the feed-forward block and their gradients are computed for one row
    instead of all (about a sixth less compute for a 6-layer encoder). The layer's ``forward`` is replaced on
    the instance, so parameters, state dicts and exported folders stay those of the standard model.
    """
    if type(model).__name__ != "BertForSequenceClassification":
        return
    layer = model.base_model.encoder.layer[-1]
    layer.forward = types.MethodType(_cls_only_forward, layer)


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
    context, _ = fast_dropout_attention(attention, query, key, value, attention_mask, scaling=attention.scaling,
                                        dropout=attention.dropout.p if layer.training else 0.0)
    attended = layer.attention.output(context.reshape(batch, 1, -1), cls)
    return layer.output(layer.intermediate(attended), attended)


def _identity_pooler(model: PreTrainedModel) -> None:
    """Make a BERT-style pooler (``tanh(W h_CLS + b)``) start as ``tanh(h_CLS)``, so that a new head reads the
    [CLS] vector itself (as CEDR's and SmoothI's heads do) rather than a projection that the encoder's
    pre-training left untrained (MiniLM's shrinks the differences between documents five-fold)."""
    dense = getattr(getattr(model.base_model, "pooler", None), "dense", None)
    if isinstance(dense, nn.Linear) and dense.in_features == dense.out_features:
        with torch.no_grad():
            dense.weight.copy_(torch.eye(dense.in_features))
            dense.bias.zero_()


@contextmanager
def _explained(name_or_path: str) -> Iterator[None]:
    """Re-raise a loading failure as an OSError that says where models are looked up."""
    try:
        yield
    except OSError as error:
        raise OSError(
            f"model {name_or_path!r} not found: give a local folder, or a hub id present in the Hugging Face "
            f"cache (HF_HOME; set HF_HUB_OFFLINE=1 when offline). Cause: {error}"
        ) from None


def load_tokenizer(name_or_path: str):  # noqa: ANN201 - any Hugging Face tokenizer
    """The model's tokenizer, with the same error as the model when it cannot be found."""
    with _explained(name_or_path):
        return AutoTokenizer.from_pretrained(name_or_path)


@torch.no_grad()
def score_pairs(model: CrossEncoder, queries: list[str], documents: list[str], max_length: int = 512) -> Tensor:
    """Scores of (query, document) pairs in one batch (for small checks; training batches come from the data module)."""
    encoded = model.tokenizer(queries, documents, truncation="only_second", max_length=max_length, padding=True,
                              return_tensors="pt")
    return model(**encoded)
