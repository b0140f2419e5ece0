"""The two re-rank request shapes that search stacks already send, read strictly.

- **Cohere's** ``POST /v1/rerank`` and ``POST /v2/rerank`` (:class:`CohereRequest`): ``{model, query, documents,
  top_n, return_documents}``, answered ``{id, results: [{index, relevance_score, document?}], meta}`` (the `cohere`
  SDK with a ``base_url``, LangChain's and LlamaIndex's Cohere re-rankers, Elasticsearch's and OpenSearch's
  ``cohere`` inference services). Documents are strings, or (v1) objects with a ``text`` field, or the fields that
  ``rank_fields`` names.
- **text-embeddings-inference's** ``POST /rerank`` (:class:`TeiRequest`): ``{query, texts, raw_scores, return_text,
  truncate, truncation_direction}``, answered ``[{index, score, text?}]``.

Both take three fields more: ``first_stage_scores`` (a number per document, e.g. BM25's), which the deployed ranker
needs when it mixes the first stage's scores (``interpolated``, ``fused``: :mod:`rerank.ranker.deployment`);
``min_score``, which keeps only the documents whose returned score is at least it; and (Cohere's, as TEI's own)
``raw_scores``, the deployed ranker's raw scores in place of its calibrated probabilities. Any other
field is refused, naming it: a misspelt ``top_k`` would otherwise be ignored in silence. :func:`parse` turns a request
body into one of these or a :class:`BadRequest` that names the field at fault. The answers and errors of each API are
models here too (:class:`CohereResponse`, :class:`CohereError`, :class:`TeiRank`, :class:`TeiError`), so that the
server's OpenAPI schema (``/openapi.json``, ``/docs``) describes every body it reads and writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCORE_LIMIT = 1e15
"""The largest first-stage score the server takes, in absolute value: far above any BM25 or model score, and far
enough below the float range that standardising a query's scores stays finite."""
Score = Annotated[float, Field(allow_inf_nan=False, ge=-SCORE_LIMIT, le=SCORE_LIMIT)]


class BadRequest(Exception):
    """A request the server refuses: ``status`` (4xx) and a message that names the field at fault."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    query: str
    first_stage_scores: list[Score] | None = None
    min_score: Annotated[float, Field(allow_inf_nan=False)] | None = None
    raw_scores: bool = False

    @model_validator(mode="after")
    def _check(self) -> _Request:
        if not self.query.strip():
            raise ValueError("query: must not be empty")
        if not self.texts:
            raise ValueError(f"{self.documents_field}: give at least one document")
        if self.first_stage_scores is not None and len(self.first_stage_scores) != len(self.texts):
            raise ValueError(f"first_stage_scores: {len(self.first_stage_scores)} scores for "
                             f"{len(self.texts)} {self.documents_field}: give one per document, in their order")
        return self

    documents_field: ClassVar[str] = "documents"

    @property
    def texts(self) -> list[str]:
        """The documents' texts, in request order."""
        raise NotImplementedError


class CohereRequest(_Request):
    """Cohere's re-rank request (v1 and v2; ``max_chunks_per_doc``, ``max_tokens_per_doc`` and ``priority`` are
    accepted and have no effect: documents are cut as the model was trained to cut them)."""

    documents: list[str | dict[str, Any]]
    model: str | None = None
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: bool = False
    rank_fields: list[str] | None = None
    max_chunks_per_doc: int | None = None
    max_tokens_per_doc: int | None = None
    priority: int | None = None

    @property
    def texts(self) -> list[str]:
        return [document if isinstance(document, str) else _fields(document, index, self.rank_fields)
                for index, document in enumerate(self.documents)]


class TeiRequest(_Request):
    """text-embeddings-inference's re-rank request (``truncate`` unset: texts are cut as the model cuts them)."""

    documents_field: ClassVar[str] = "texts"
    texts_: list[str] = Field(alias="texts")
    return_text: bool = False
    truncate: bool | None = None
    truncation_direction: Literal["right", "Right"] = "right"

    @property
    def texts(self) -> list[str]:
        return self.texts_


def _fields(document: dict[str, Any], index: int, rank_fields: Sequence[str] | None) -> str:
    """An object document's text: its ``text`` field, or the ``rank_fields`` it has, one ``name: value`` a line."""
    names = list(rank_fields or ["text"])
    values = {name: document.get(name) for name in names}
    if rank_fields is None and not isinstance(values["text"], str):
        raise ValueError(f"documents[{index}]: a string, or an object with a string field text")
    wrong = [name for name, value in values.items() if value is not None and not isinstance(value, str)]
    if wrong or all(value is None for value in values.values()):
        raise ValueError(f"documents[{index}]: the rank_fields {', '.join(names)} must be strings, at least one "
                         "present")
    if rank_fields is None:
        return values["text"]
    return "\n".join(f"{name}: {value}" for name, value in values.items() if value is not None)


R = TypeVar("R", bound=_Request)


def parse(body: bytes, shape: type[R], invalid_status: int) -> R:
    """``body`` read as a request of ``shape``.

    Raises:
        BadRequest: 400 for bytes that are not UTF-8 or not JSON; ``invalid_status`` for JSON that is not such a
            request, naming the field (``documents[3]: Input should be a valid string``).
    """
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise BadRequest(400, f"the request body is not UTF-8 (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise BadRequest(400, f"the request body is not JSON: {error.msg} at line {error.lineno} column "
                              f"{error.colno}") from None
    except RecursionError:
        raise BadRequest(400, "the request body nests its JSON too deeply to be read") from None
    if not isinstance(data, dict):
        raise BadRequest(invalid_status, f"the request body must be a JSON object; got {type(data).__name__}")
    try:
        return shape.model_validate(data)
    except ValidationError as error:
        described: dict[str, list[str]] = {}  # a union's branches fail at one place: one message for it
        for item in error.errors():
            location, message = _described(item)
            described.setdefault(location, []).append(message)
        raise BadRequest(invalid_status, "; ".join(
            f"{location}: " * bool(location) + _either(messages) for location, messages in described.items())) from None


def _either(messages: list[str]) -> str:
    """One message, or a union's (``Input should be a valid string or a valid dictionary``)."""
    prefix = "Input should be "
    if len(messages) == 1 or not all(message.startswith(prefix) for message in messages):
        return "; ".join(messages)
    return prefix + " or ".join(message.removeprefix(prefix) for message in messages)


def _described(error: dict[str, Any]) -> tuple[str, str]:
    """A pydantic error's field (``documents[2]``) and message."""
    location = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    location = location.removesuffix(".str").split(".dict[")[0]  # a union's branch names are not the field's
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field (this API does not have it)"
    if ": " in message and not location:  # the request's own checks name their field
        location, message = message.split(": ", 1)
    return location, message


class CohereDocument(BaseModel):
    """A document as Cohere's answer returns it (``return_documents``)."""

    text: str


class CohereResult(BaseModel):
    """One ranked document of Cohere's answer: its index in the request, its score, and the document if asked."""

    index: int
    relevance_score: float
    document: CohereDocument | None = None


class CohereMeta(BaseModel):
    api_version: dict[str, str]
    billed_units: dict[str, int]


class CohereResponse(BaseModel):
    """Cohere's re-rank answer: the documents best first, ``top_n`` of them."""

    id: str
    results: list[CohereResult]
    meta: CohereMeta


class CohereError(BaseModel):
    """Cohere's error body."""

    message: str


class TeiRank(BaseModel):
    """One ranked text of text-embeddings-inference's answer (a list of them, best first)."""

    index: int
    score: float
    text: str | None = None


class TeiError(BaseModel):
    """text-embeddings-inference's error body."""

    error: str
    error_type: str
