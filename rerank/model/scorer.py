"""Re-ranking with a trained (or any one-label) cross-encoder, from Python.

    >>> reranker = Reranker.from_pretrained("runs/cranfield/model")  # doctest: +SKIP
    >>> reranker.score("wind tunnel", ["doc one", "doc two"])  # doctest: +SKIP
    [1.73, -0.42]
    >>> reranker.rerank("wind tunnel", ["doc one", "doc two"], top_k=1)  # doctest: +SKIP
    [(0, 1.73)]

A folder exported by rerank carries the tokenization it was trained and evaluated with (``max_length``,
``max_query_length``, passages), and the reranker uses it unless told otherwise; any other model gets the
defaults of :class:`~rerank.config.tokenization.TokenizationConfig` (``max_length`` capped by the tokenizer's).
Pairs are tokenized once, sorted by token length and cut into batches, so that a batch pads its rows to a
length close to their own (and long documents do not make every batch long); scores come back in input order.
For runs too large for one process, ``rerank predict`` scores them across devices (:mod:`rerank.cli.predict`).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from itertools import islice

import torch
from tqdm.auto import tqdm

from ..config.precision import SCORING
from ..core.checks import check_range
from ..data.documents import Documents
from ..data.trec import Run
from . import speedups
from .cross_encoder import CrossEncoderModel, max_over_passages, require_trained_head, saved_tokenization
from .tokenization import PairTokenizer

logger = logging.getLogger(__name__)

DTYPES = {"32": None, "bf16": torch.bfloat16, "16": torch.float16, "bf16-true": torch.bfloat16,
          "16-true": torch.float16}
"""The dtype of each of :data:`~rerank.config.precision.PRECISIONS`."""


def scoring_device(device: str | None = None) -> torch.device:
    """The device a scorer runs on: ``device``, or the GPU when there is one, else the CPU."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def int8_model(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with its encoder's linear layers' weights quantized to int8 (per output channel, symmetric) and
    their inputs quantized per batch as they come (PyTorch's dynamic quantization: int8 matrix products on the CPU's
    dot-product instructions); the scoring head stays in float32. The same weights always give the same int8
    model."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    encoder = getattr(model, "base_model_prefix", "")
    layers = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and name.startswith(f"{encoder}.encoder.")}
    with warnings.catch_warnings():  # PyTorch's notice that this API moves to torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, layers, dtype=torch.qint8)


def _in_precision(model: CrossEncoderModel, precision: str) -> CrossEncoderModel:
    """``model`` itself, or for ``int8`` and the ``-true`` precisions a converted copy (the given model unchanged)."""
    if precision == "int8":
        converted = int8_model(model.model)
    elif precision.endswith("-true"):
        converted = copy.deepcopy(model.model).to(DTYPES[precision])
    else:
        return model
    return CrossEncoderModel(converted, model.tokenizer, model.tokenization, model.head_trained)


class PairScorer:
    """Scores (query, document) pairs with a cross-encoder.

    Args:
        model: the cross-encoder (its ``tokenization`` applies unless overridden).
        batch_size: rows per forward pass.
        device: ``cpu``, ``cuda``, ``cuda:1``, ... (default: CUDA when available).
        precision: ``32``, ``bf16`` or ``16`` (autocast), ``bf16-true`` or ``16-true`` (weights cast), ``int8`` (the
            linear layers' weights quantized to int8 per output channel, activations per batch: on a CPU,
            :func:`int8_model`).
        chunk_size: pairs tokenized and length-sorted together.
        exact: the exact speed-ups of :mod:`rerank.model.speedups` to apply (``cls_only_last_layer``, ``unpadded``).
        **tokenization: overrides of the model's :class:`~rerank.config.tokenization.TokenizationConfig`
            (``max_length``, ``max_query_length``, ``passages``, ``stride``, ``max_passages``); a value that
            differs from what an exported model was trained with is logged.
    """

    def __init__(self, model: CrossEncoderModel, batch_size: int = 32, device: str | None = None, precision: str = "32",
                 chunk_size: int = 4096, exact: Sequence[str] = ("cls_only_last_layer",),
                 **tokenization: object) -> None:
        if precision not in SCORING:
            raise ValueError(f"precision must be one of {', '.join(SCORING)}; got {precision!r}")
        check_range("batch_size", batch_size, 1)
        self.device = scoring_device(device)
        if precision == "int8" and self.device.type != "cpu":
            raise ValueError(f"precision int8 scores on a CPU; got device {self.device}")
        self.model = _in_precision(model.to(self.device).eval(), precision)
        self.precision = precision
        speedups.enable(self.model.model, exact)  # the [CLS]-only last layer by default: exact, a sixth faster
        self.batch_size, self.chunk_size = batch_size, chunk_size
        self.dtype = None if precision.endswith("-true") else DTYPES.get(precision)  # autocast dtype
        changed = {key: value for key, value in tokenization.items() if getattr(model.tokenization, key) != value}
        if changed and saved_tokenization(model.model.config) is not None:
            logger.warning("re-ranking with %s; this model was trained and evaluated with %s", changed,
                           {key: getattr(model.tokenization, key) for key in changed})
        self.tokenize = PairTokenizer(model.tokenizer, dataclasses.replace(model.tokenization, **tokenization))

    @classmethod
    def from_pretrained(cls, name_or_path: str, untrained_head: bool = False, **options: object) -> PairScorer:
        """A scorer from an exported folder or a sequence-classification cross-encoder; an encoder whose weights
        hold no scoring head only with ``untrained_head`` (its scores then come from a random head).

        Raises:
            UserError: the model's scoring head is not in its weights, and ``untrained_head`` is not set.
        """
        model = CrossEncoderModel.from_pretrained(name_or_path)
        if not untrained_head:
            require_trained_head(model, name_or_path)
        return cls(model, **options)

    @torch.inference_mode()
    def score_pairs(self, queries: Iterable[str], documents: Iterable[str],
                    progress: tqdm | None = None) -> list[float]:
        """The score of each (query, document) pair, in input order. The pairs are drawn ``chunk_size`` at a time,
        so lazily produced texts are only held one chunk at a time; ``progress`` advances by each chunk's pairs."""
        pairs = zip(queries, documents)
        scores: list[float] = []
        while chunk := list(islice(pairs, self.chunk_size)):
            chunk_queries, chunk_documents = zip(*chunk)
            scores += self._score_chunk(list(chunk_queries), list(chunk_documents))
            if progress is not None:
                progress.update(len(chunk))
        return scores

    def _score_chunk(self, queries: list[str], documents: list[str]) -> list[float]:
        rows, pair_of_row = self.tokenize.encode(queries, documents)
        order = sorted(range(len(pair_of_row)), key=lambda row: len(rows["input_ids"][row]))
        autocast = (torch.autocast(self.device.type, dtype=self.dtype) if self.dtype is not None else nullcontext())
        batch_scores = []
        for start in range(0, len(order), self.batch_size):
            batch = order[start: start + self.batch_size]
            inputs = self.tokenize.pad({key: [values[row] for row in batch] for key, values in rows.items()})
            if self.device.type == "cuda":
                inputs = inputs.pin_memory()  # the copies below then leave the host free (rerank.data.pinning)
            with autocast:
                scores = self.model(*(None if tensor is None else tensor.to(self.device, non_blocking=True)
                                      for tensor in (inputs.input_ids, inputs.attention_mask, inputs.token_type_ids)))
            batch_scores.append(scores.float())
        row_scores = torch.empty(len(pair_of_row))
        if batch_scores:  # one device-to-host copy a chunk: the CPU pads the next batch while the device computes
            row_scores[torch.tensor(order)] = torch.cat(batch_scores).cpu()
        return max_over_passages(row_scores, torch.tensor(pair_of_row), len(documents)).tolist()

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        """Scores of ``documents`` for ``query``."""
        return self.score_pairs([query] * len(documents), documents)

    def rerank(self, query: str, documents: Sequence[str], top_k: int | None = None) -> list[tuple[int, float]]:
        """``(index into documents, score)``, best first (ties: the earlier document first)."""
        scores = self.score(query, documents)
        return sorted(enumerate(scores), key=lambda item: (-item[1], item[0]))[:top_k]

    def rerank_many(self, queries: Mapping[str, str], candidates: Mapping[str, Mapping[str, str]],
                    progress: str | None = None) -> Run:
        """A run ``{query id: {doc id: score}}`` for ``candidates`` (``{query id: {doc id: text}}``), in batches
        that mix queries. Texts are read ``chunk_size`` pairs at a time, so ``candidates`` may look them up lazily
        (:class:`CandidateTexts`) and only one chunk's texts are held in memory. ``progress``: a progress bar's
        description (None: no bar)."""
        keys = [(qid, doc) for qid, docs in candidates.items() for doc in docs]
        with tqdm(total=len(keys), desc=progress, unit="pair", disable=progress is None) as bar:
            scores = self.score_pairs((queries[qid] for qid, _ in keys), (candidates[qid][doc] for qid, doc in keys),
                                      bar)
        run: Run = {}
        for (qid, doc), score in zip(keys, scores):
            run.setdefault(qid, {})[doc] = score
        return run


class CandidateTexts(Mapping[str, str]):
    """One query's candidates, ``{doc id: text}``, with each text read from the collection when it is scored."""

    def __init__(self, doc_ids: Iterable[str], documents: Documents) -> None:
        self.doc_ids, self.documents = list(doc_ids), documents

    def __getitem__(self, doc_id: str) -> str:
        return self.documents.text(doc_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self.doc_ids)

    def __len__(self) -> int:
        return len(self.doc_ids)
