"""The scoring model: ``[CLS] query [SEP] document [SEP]`` -> encoder -> [CLS] head -> one relevance score.

:class:`CrossEncoderModel` wraps a Hugging Face sequence-classification model with one label
(``AutoModelForSequenceClassification(num_labels=1)``), its tokenizer and the tokenization it is trained and
evaluated with (:class:`~rerank.config.tokenization.TokenizationConfig`). For BERT-style encoders the head is the
[CLS] vector through BERT's pooler, dropout and a linear layer; other architectures bring their own [CLS] head
(ELECTRA's dense-GELU-linear, for instance). Keeping the library's own classes means that:

- any encoder loads by hub id or local path (``bert-base-uncased``, ``google/electra-base-discriminator``,
  ``sentence-transformers/all-MiniLM-L6-v2``), with a freshly initialised head;
- an existing sequence-classification cross-encoder (``cross-encoder/ms-marco-MiniLM-L-6-v2``) keeps its
  trained head;
- a trained model saves to a folder that ``transformers`` and ``sentence_transformers.CrossEncoder`` load as is,
  with its tokenization in ``config.json`` (key ``rerank``) and the tokenizer's ``model_max_length`` set to it.

Example::

    >>> model = CrossEncoderModel.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> scores = model.score(model.pair_tokenizer()(["a query"], ["a document"]))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

from ..config.tokenization import TokenizationConfig
from ..core.errors import UserError
from .tokenization import PairInputs, PairTokenizer

logger = logging.getLogger(__name__)

ENCODER_DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout")
"""The dropout settings of Hugging Face encoder configs (BERT's, ELECTRA's and MiniLM's; DistilBERT's)."""
CONFIG_KEY = "rerank"
"""The key of ``config.json`` that holds what rerank trained the model with (``{"tokenization": {...}}``)."""


class CrossEncoderModel(nn.Module):
    """A one-output sequence-classification model, its tokenizer and its tokenization, scoring pairs."""

    def __init__(self, model: PreTrainedModel, tokenizer=None,
                 tokenization: TokenizationConfig | None = None, head_trained: bool = True) -> None:
        super().__init__()
        if model.config.num_labels != 1:
            raise ValueError(f"a cross-encoder has one output; this model has num_labels={model.config.num_labels}")
        self.model = model
        self.tokenizer = tokenizer
        self.head_trained = head_trained
        """Whether the scoring head came from the loaded weights (False: freshly initialised, untrained)."""
        self.tokenization = (tokenization or saved_tokenization(model.config)
                             or default_tokenization(tokenizer)).check_resolved()

    @classmethod
    def from_pretrained(
        cls, name_or_path: str, dropout: float | None = None, gradient_checkpointing: bool = False,
        tokenization: TokenizationConfig | None = None, encoder_dropout: float | None = None,
    ) -> CrossEncoderModel:
        """Load an encoder (new head) or a one-label sequence-classification model (its trained head kept).

        Args:
            name_or_path: a Hugging Face hub id (from the local cache when offline) or a local folder.
            dropout: the classifier dropout (default: the model config's).
            gradient_checkpointing: trade compute for memory in the encoder's backward pass.
            tokenization: lengths and passages (default: those the folder was trained with, else the defaults).
            encoder_dropout: the encoder's dropout, of hidden states and attention probabilities (default: the
                model config's; BERT's classifier follows it unless ``dropout`` is given).

        Raises:
            OSError: the model is neither a local folder nor in the Hugging Face cache (offline), with the id.
            ValueError: ``encoder_dropout`` for a model whose config names no dropout rerank knows.
        """
        with _explained(name_or_path):
            config = AutoConfig.from_pretrained(name_or_path)
        config.num_labels = 1
        if dropout is not None:
            config.classifier_dropout = dropout
        if encoder_dropout is not None:
            names = [name for name in ENCODER_DROPOUTS if hasattr(config, name)]
            if not names:
                raise ValueError(f"model.encoder_dropout: the config of {name_or_path} has none of "
                                 f"{', '.join(ENCODER_DROPOUTS)}")
            for name in names:
                setattr(config, name, encoder_dropout)
        # float32 weights whatever the folder holds (a half-precision export, say): training keeps float32 master
        # weights under mixed precision, and Reranker casts for inference (its precision option)
        model, loading = AutoModelForSequenceClassification.from_pretrained(name_or_path, config=config,
                                                                            output_loading_info=True)
        model = model.float()
        head_trained = not new_head(model, loading)
        if not head_trained:
            logger.info("%s: a new one-output head on the [CLS] vector", name_or_path)
            _identity_pooler(model)
        if gradient_checkpointing:
            enable_activation_checkpointing(model)
        return cls(model, load_tokenizer(name_or_path), tokenization, head_trained)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None,
                chunk_size: int | None = None) -> Tensor:
        """``[B]`` scores of B tokenized (right-padded) rows.

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

    def score(self, inputs: PairInputs, chunk_size: int | None = None) -> Tensor:
        """``[pairs]`` scores of tokenized pairs; with MaxP passages, each pair's best passage's."""
        scores = self(inputs.input_ids, inputs.attention_mask, inputs.token_type_ids, chunk_size=chunk_size)
        if inputs.passage_to_pair is not None:
            scores = max_over_passages(scores, inputs.passage_to_pair, inputs.pairs)
        return scores

    def _scores(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None) -> Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        return self.model(**inputs).logits.squeeze(-1)

    def pair_tokenizer(self) -> PairTokenizer:
        """The tokenizer of (query, document) pairs with this model's tokenization."""
        return PairTokenizer(self.tokenizer, self.tokenization)

    def head_parameters(self) -> list[nn.Parameter]:
        """The parameters of the classification head (everything outside the base encoder)."""
        encoder = {id(p) for p in self.model.base_model.parameters()}
        return [p for p in self.model.parameters() if id(p) not in encoder]

    def freeze_embeddings(self) -> None:
        """Keep the encoder's embeddings (tokens, positions, segments and their LayerNorm) as loaded: no gradient,
        no optimizer state (less work per step; docs/experiments/benchmarks.md)."""
        embeddings = getattr(self.model.base_model, "embeddings", None) or self.model.get_input_embeddings()
        for parameter in embeddings.parameters():
            parameter.requires_grad_(False)

    def encoder_parameters(self) -> list[nn.Parameter]:
        """The parameters of the base encoder."""
        return list(self.model.base_model.parameters())

    def save_pretrained(self, folder: str, **records: object) -> None:
        """Save model and tokenizer in the Hugging Face layout (``model.safetensors``, config, tokenizer), with the
        tokenization and ``records`` (plain values, e.g. ``deployment``) in ``config.json`` under ``rerank``, and
        the tokenizer's ``model_max_length`` at ``max_length``."""
        config = self.model.config
        setattr(config, CONFIG_KEY, {**(getattr(config, CONFIG_KEY, None) or {}),
                                     "tokenization": dataclasses.asdict(self.tokenization), **records})
        self.model.save_pretrained(folder, safe_serialization=True)
        if self.tokenizer is not None:
            previous = self.tokenizer.model_max_length
            self.tokenizer.model_max_length = self.tokenization.max_length
            try:
                self.tokenizer.save_pretrained(folder)
            finally:
                self.tokenizer.model_max_length = previous


def saved_record(config: object, key: str) -> Any:
    """What a rerank export's ``config.json`` records under ``rerank.<key>`` (None when absent); ``config``: a
    ``transformers`` config, or the parsed ``config.json``."""
    section = config.get(CONFIG_KEY) if isinstance(config, Mapping) else getattr(config, CONFIG_KEY, None)
    return (section or {}).get(key)


def saved_tokenization(config: object) -> TokenizationConfig | None:
    """The tokenization a rerank export records in its ``config.json``, if any."""
    saved = saved_record(config, "tokenization")
    return TokenizationConfig(**saved) if saved else None


def default_tokenization(tokenizer=None) -> TokenizationConfig:
    """:class:`TokenizationConfig`'s defaults, ``max_length`` capped by the tokenizer's (and the query cap with it)."""
    default = TokenizationConfig()
    length = min(default.max_length, getattr(tokenizer, "model_max_length", default.max_length))
    if length == default.max_length:
        return default
    return dataclasses.replace(default, max_length=length, max_query_length=min(default.max_query_length, length // 2))


def resolve_tokenization(name_or_path: str, tokenization: TokenizationConfig | None) -> TokenizationConfig:
    """``tokenization`` when given, else the one the model was exported with, else the defaults (as
    :class:`CrossEncoderModel` resolves it)."""
    if tokenization is not None:
        return tokenization
    with _explained(name_or_path):
        config = AutoConfig.from_pretrained(name_or_path)
    return saved_tokenization(config) or default_tokenization(load_tokenizer(name_or_path))


def exported_tokenization(name_or_path: str) -> TokenizationConfig | None:
    """The tokenization that a model exported by rerank was trained with (its ``config.json``), else None."""
    with _explained(name_or_path):
        return saved_tokenization(AutoConfig.from_pretrained(name_or_path))


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


def enable_activation_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each layer's activations in the backward pass (``activation_checkpointing_enable`` since
    transformers 5, ``gradient_checkpointing_enable`` before it, now a deprecated alias that warns)."""
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()


def new_head(model: PreTrainedModel, loading: dict[str, Any]) -> bool:
    """Whether ``model``'s scoring head (its parameters outside the base encoder) was freshly initialised when it
    was loaded: missing from the weights, or of another shape (a two-label head, say); ``loading`` is
    ``from_pretrained``'s ``output_loading_info``."""
    prefix = f"{model.base_model_prefix}."
    head = {name for name, _ in model.named_parameters() if not name.startswith(prefix)}
    fresh = set(loading.get("missing_keys") or ()) | {key[0] if isinstance(key, tuple) else key
                                                       for key in loading.get("mismatched_keys") or ()}
    return bool(head & fresh)


def require_trained_head(model: CrossEncoderModel, name_or_path: str) -> None:
    """Fail when ``model``'s scoring head is not in its weights: its scores would come from random weights.

    Raises:
        UserError: naming the folder, what to give instead, and the option that scores such a model on purpose.
    """
    if not model.head_trained:
        raise UserError(f"{name_or_path}: its weights hold no scoring head, so its scores would come from a freshly "
                        "initialised, untrained one: give the folder rerank fit exports (OUTPUT/model) or a "
                        "cross-encoder with a trained head (e.g. cross-encoder/ms-marco-MiniLM-L6-v2); to score "
                        "this encoder with an untrained head on purpose, pass --untrained_head (Python: "
                        "untrained_head=True)")


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


def load_tokenizer(name_or_path: str):
    """The model's tokenizer, with the same error as the model when it cannot be found."""
    with _explained(name_or_path):
        return AutoTokenizer.from_pretrained(name_or_path)
