"""The HTTP application of ``rerank serve`` (FastAPI, served by uvicorn): the deployed ranker behind the two re-rank
APIs that search stacks already call.

=========================  =============================================================================
``POST /v1/rerank``        Cohere's re-rank API, version 1 (:class:`~rerank.inference.serving.requests.CohereRequest`)
``POST /v2/rerank``        the same, version 2
``POST /rerank``           text-embeddings-inference's (:class:`~rerank.inference.serving.requests.TeiRequest`)
``GET /health``            200 while the process answers
``GET /ready``             200 once the model is loaded and has scored a first pair, else 503
``GET /info``              the model, its deployed ranker and weights, its rows, the limits, the version
=========================  =============================================================================

Every request is scored by the export's deployed ranker (:class:`~rerank.inference.reranker.Reranker`), batched with
the other requests in flight (:mod:`rerank.inference.serving.batching`), so a request gets what ``Reranker.rerank``
gives for the same query and documents, in its order. Where the export carries the deployed ranker's calibration
(:mod:`rerank.evaluation.calibration`), Cohere's ``relevance_score`` and text-embeddings-inference's ``score`` are
its probability of relevance unless the request sets ``raw_scores``; ``min_score`` keeps the documents whose returned
score is at least it; ``/info`` says which map applies. The deployed ranker's name is in each answer's
``X-Rerank-Ranker`` header; a model served with an untrained head (``--untrained_head``) says so in
``X-Rerank-Untrained-Head: true`` and in ``/info``.

Refusals, each in the original API's error shape (Cohere: ``{"message": ...}``; text-embeddings-inference:
``{"error": ..., "error_type": ...}``), naming the field at fault, the server serving on:

- 400: a body that is not UTF-8 or not JSON (and, for Cohere, any request it cannot read, as Cohere answers);
- 422 (text-embeddings-inference): a field missing, of the wrong type, unknown, or empty;
- 413: a body over ``serve.max_body_bytes`` (refused before it is read whole), or (text-embeddings-inference) more
  documents than ``serve.max_documents``, as its batch-size limit answers;
- 422: a deployed ranker that mixes the first stage's scores asked without ``first_stage_scores``; with
  ``truncate: false``, a text longer than the row (as text-embeddings-inference answers);
- 503 with ``Retry-After``: the model still warming up, or the queue full.

A client that goes away before its batch begins costs nothing: its request leaves the queue unscored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...config.serve import ServeConfig
from ...evaluation.calibration import Calibration, sigmoid
from ...version import __version__
from ..reranker import Reranker
from .batching import Batcher, Job, QueueFull
from .requests import BadRequest, CohereError, CohereRequest, CohereResponse, TeiError, TeiRank, TeiRequest, parse

logger = logging.getLogger(__name__)

VERSION = __version__
RETRY_AFTER = "1"
"""Seconds a refused client is asked to wait (``Retry-After``) when the queue is full or the model loading."""
UNTRAINED = "X-Rerank-Untrained-Head"
"""The header of every answer scored by a model whose head its weights did not hold (``--untrained_head``)."""


class Service:
    """The deployed ranker behind the server: warmed on one pair in a thread of its own (``/ready`` says when it
    is done), then scoring the batcher's batches."""

    def __init__(self, model: str, reranker: Reranker, config: ServeConfig) -> None:
        self.model, self.reranker, self.config = model, reranker, config
        self._key = config.key()
        self.batcher: Batcher | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        """Warm the model (its first pair, the teacher's too) in the background, then open the queue."""
        threading.Thread(target=self._start, name="rerank-warm-up", daemon=True).start()

    def _start(self) -> None:
        needs = self.reranker.deployment.needs_first_stage
        self.reranker.rerank("warm", ["up"], first_stage_scores=[0.0] if needs else None)
        config = self.config
        self.batcher = Batcher(self.score, config.batch_pairs, config.max_wait_ms / 1000, config.max_queue_pairs)
        self.ready.set()
        logger.info("rerank serve: ready, re-ranking with %s", self.reranker.deployment.describe())

    def score(self, jobs: list[Job]) -> list[list[float]]:
        """The deployed ranker's scores of each job's documents, the jobs' pairs batched together."""
        queries = {str(i): job.query for i, job in enumerate(jobs)}
        candidates = {str(i): {str(j): text for j, text in enumerate(job.documents)} for i, job in enumerate(jobs)}
        first_stage = None
        if self.reranker.deployment.needs_first_stage:
            first_stage = {str(i): {str(j): float(score) for j, score in enumerate(job.first_stage_scores)}
                           for i, job in enumerate(jobs)}
        run = self.reranker.rerank_many(queries, candidates, first_stage)
        return [[run[str(i)][str(j)] for j in range(len(job.documents))] for i, job in enumerate(jobs)]

    def authorised(self, request: Request) -> bool:
        """Whether ``request`` carries the server's key (``Authorization: Bearer KEY``), or the server has none."""
        if self._key is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._key.encode())

    def stop(self) -> None:
        """Score what is queued, then stop."""
        if self.batcher is not None:
            self.batcher.close()

    def info(self) -> dict[str, Any]:
        """What ``GET /info`` answers."""
        deployment, config = self.reranker.deployment, self.config
        tokenization = self.reranker.tokenize.config
        return {"model": self.model, "version": VERSION, "ready": self.ready.is_set(),
                "ranker": deployment.ranker, "description": deployment.describe(), "weights": deployment.weights,
                "needs_first_stage_scores": deployment.needs_first_stage,
                "untrained_head": self.reranker.untrained_head, "api_key": self._key is not None,
                "teacher": deployment.teacher.bi_encoder if deployment.teacher is not None else None,
                "max_length": tokenization.max_length, "max_query_length": tokenization.max_query_length,
                "device": str(self.reranker.device), "precision": self.reranker.precision,
                "precision_reason": self.reranker.precision_reason,
                "fast_scoring": {name: gate.as_dict() for name, gate in self.reranker.gates.items()},
                "calibration": self._calibration(),
                "limits": {"max_documents": config.max_documents, "max_body_bytes": config.max_body_bytes,
                           "batch_pairs": config.batch_pairs, "max_wait_ms": config.max_wait_ms,
                           "max_queue_pairs": config.max_queue_pairs},
                "scored": dict(self.batcher.scored) if self.batcher is not None else None,
                "remembered_documents": len(self.reranker.memo) if self.reranker.memo is not None else 0,
                "queued_pairs": self.batcher.queued_pairs if self.batcher is not None else 0}


    def _calibration(self) -> dict[str, Any]:
        """``/info``'s account of the scores each API returns."""
        calibration = self.reranker.calibration
        if calibration is None:
            return {"applied": None, "relevance_score": "the deployed ranker's raw score",
                    "score": "the sigmoid of the deployed ranker's score"}
        return {"applied": calibration.method, "description": calibration.describe(),
                "threshold": calibration.threshold, "relevance_score": "the calibrated probability",
                "score": "the calibrated probability", "map": calibration.as_dict()}


@dataclass(frozen=True)
class Api:
    """How one of the two APIs reads its requests and says its errors."""

    shape: type[CohereRequest] | type[TeiRequest]
    answer: type[BaseModel]  # the model of an answer (TEI's: a list of them)
    invalid: int  # the status of a request that is JSON but not such a request
    too_many: int  # the status of a request with more documents than the limit

    def error(self, status: int, message: str, kind: str = "validation", headers: dict | None = None) -> JSONResponse:
        if self.shape is CohereRequest:
            body: dict[str, str] = {"message": message}
        else:
            body = {"error": message, "error_type": kind}
        return JSONResponse(body, status_code=status, headers=headers)

    @property
    def error_model(self) -> type[BaseModel]:
        return CohereError if self.shape is CohereRequest else TeiError

    def openapi(self) -> dict[str, Any]:
        """The route's OpenAPI declarations: its request body (read by the route itself, so that the byte limit holds
        before the body is read whole), its answer and its errors, each in this API's shape."""
        fields = "a field missing, of the wrong type, unknown, or empty"
        errors = {400: "a body that is not UTF-8 or not JSON" + (f"; {fields}" if self.invalid == 400 else ""),
                  401: "a missing or wrong API key (a server given one: serve.api_key or RERANK_API_KEY)",
                  413: "a body, or a list of documents, over the server's limits (GET /info lists them)",
                  422: (f"{fields}; " if self.invalid == 422 else "") + "a request the deployed ranker cannot score "
                       "as it stands (first_stage_scores missing, a text that truncate: false refuses to cut)",
                  500: "a failure of the server on this request alone (it goes on serving)",
                  503: "the model warming up, or the queue full (Retry-After)"}
        return {"response_model": self.answer if self.shape is CohereRequest else list[self.answer],
                "responses": {status: {"model": self.error_model, "description": why}
                              for status, why in errors.items()},
                "openapi_extra": {"requestBody": {"required": True, "content": {"application/json": {
                    "schema": self.shape.model_json_schema(by_alias=True, ref_template=REF)}}}}}


REF = "#/components/schemas/{model}"
COHERE = Api(CohereRequest, CohereResponse, invalid=400, too_many=400)
TEI = Api(TeiRequest, TeiRank, invalid=422, too_many=413)
APIS = {"/v1/rerank": COHERE, "/v2/rerank": COHERE, "/rerank": TEI}


def create_app(service: Service) -> FastAPI:
    """The application over ``service`` (started with the application, stopped after the requests in flight)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start()
        yield
        await asyncio.to_thread(service.stop)

    app = FastAPI(title="rerank serve", version=VERSION, lifespan=lifespan, docs_url="/docs", redoc_url=None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        """404, 405 and the like, in the shape of the API the path belongs to (Cohere's elsewhere)."""
        api = APIS.get(request.url.path, COHERE)
        return api.error(error.status_code, f"{request.method} {request.url.path}: {error.detail}",
                         "not_found" if error.status_code == 404 else "validation", getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def failure(request: Request, error: Exception) -> JSONResponse:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=error)
        api = APIS.get(request.url.path, COHERE)
        return api.error(500, f"the server failed on this request ({type(error).__name__}); it goes on serving",
                         "backend")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if service.ready.is_set():
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "warming up"}, status_code=503, headers={"Retry-After": RETRY_AFTER})

    @app.get("/info", responses={401: {"model": CohereError, "description": "a missing or wrong API key"}})
    async def info(request: Request) -> Any:
        if not service.authorised(request):
            return _unauthorised(COHERE)
        return service.info()

    @app.post("/v1/rerank", **COHERE.openapi())
    async def cohere_v1(request: Request) -> Response:
        return await _rerank(request, service, COHERE, _cohere_answer("1"))

    @app.post("/v2/rerank", **COHERE.openapi())
    async def cohere_v2(request: Request) -> Response:
        return await _rerank(request, service, COHERE, _cohere_answer("2"))

    @app.post("/rerank", **TEI.openapi())
    async def tei(request: Request) -> Response:
        return await _rerank(request, service, TEI, _tei_answer)

    return app


Answer = Callable[[Any, list[float], Calibration | None], Any]


async def _rerank(request: Request, service: Service, api: Api, answer: Answer) -> Response:
    """Read, check, queue, wait for the scores (or the client's going away), answer."""
    config = service.config
    if not service.authorised(request):
        return _unauthorised(api)
    try:
        body = await _body(request, config.max_body_bytes)
        parsed = parse(body, api.shape, api.invalid)
        texts = parsed.texts
        if len(texts) > config.max_documents:
            raise BadRequest(api.too_many, f"{parsed.documents_field}: {len(texts)} documents; this server takes at "
                                           f"most {config.max_documents} a request (serve.max_documents)")
        if not service.ready.is_set():
            return api.error(503, "the model is warming up; retry shortly (GET /ready says when)", "not_ready",
                             {"Retry-After": RETRY_AFTER})
        reranker = service.reranker
        if reranker.deployment.needs_first_stage and parsed.first_stage_scores is None:
            raise BadRequest(422, f"first_stage_scores: this server deploys {reranker.deployment.describe()}, which "
                                  "mixes the candidates' first-stage scores: send first_stage_scores, one number "
                                  f"per document (e.g. BM25's) in the order of {parsed.documents_field}")
        if getattr(parsed, "truncate", None) is False:
            _check_untruncated(reranker, parsed.query, texts, parsed.documents_field)
        future = service.batcher.submit(Job(parsed.query, texts, parsed.first_stage_scores))
    except BadRequest as refused:
        return api.error(refused.status, refused.message,
                         "payload_too_large" if refused.status == 413 else "validation")
    except QueueFull as full:
        return api.error(503, f"the server is at capacity ({full}); retry after {RETRY_AFTER} s", "overloaded",
                         {"Retry-After": RETRY_AFTER})
    try:
        scores = await _scores(request, future)
    except Exception as error:  # this request's own failure (a batch that failed is scored again job by job)
        logger.error("scoring a request failed", exc_info=error)
        return api.error(500, f"the server failed to score this request ({type(error).__name__}); it goes on "
                              "serving", "backend")
    if scores is None:  # the client went away: its pairs were not scored (or are no longer waited for)
        return Response(status_code=499)
    if not all(math.isfinite(score) for score in scores):
        return api.error(422, "the deployed ranker gave a score that is not a finite number for this request "
                              "(first_stage_scores too far apart?)")
    return JSONResponse(answer(parsed, scores, reranker.calibration), headers=_headers(reranker))


def _unauthorised(api: Api) -> JSONResponse:
    return api.error(401, "this server takes requests with its API key: send Authorization: Bearer KEY",
                     "unauthorized", {"WWW-Authenticate": "Bearer"})


def _headers(reranker: Reranker) -> dict[str, str]:
    """What every scored answer carries: the deployed ranker, and that its head is untrained where it is."""
    return {"X-Rerank-Ranker": reranker.ranker, **({UNTRAINED: "true"} if reranker.untrained_head else {})}


async def _body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"the request body has {declared} bytes; this server takes at most {limit} "
                              "(serve.max_body_bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"the request body exceeds {limit} bytes (serve.max_body_bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


async def _scores(request: Request, future: Any) -> list[float] | None:
    """The job's scores, or None when the client disconnects first (its job is then cancelled: unscored if its
    batch has not begun)."""
    scored = asyncio.wrap_future(future)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(disconnected())
    done, _ = await asyncio.wait({scored, gone}, return_when=asyncio.FIRST_COMPLETED)
    if scored in done:
        gone.cancel()
        return scored.result()
    future.cancel()
    return None


def _check_untruncated(reranker: Reranker, query: str, texts: list[str], field: str) -> None:
    """A 422 naming the first text that the row would cut (``truncate: false``)."""
    query_cut, documents_cut = reranker.tokenize.cut(query, texts)
    config = reranker.tokenize.config
    if query_cut:
        raise BadRequest(422, f"query: longer than the {config.max_query_length} tokens this model reads of a query; "
                              "send truncate: true to have it cut")
    if documents_cut:
        raise BadRequest(422, f"{field}[{documents_cut[0]}]: longer than the {config.max_length}-token row this model "
                              f"reads ({len(documents_cut)} such text(s)); send truncate: true to have them cut")


def _ranked(request: CohereRequest | TeiRequest, scores: list[float], reported: list[float]) -> list[int]:
    """The documents' indices, best first by the deployed ranker's scores (ties: the earlier document first), as
    ``Reranker.rerank`` orders them, those whose ``reported`` score is below ``min_score`` left out."""
    order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
    return [index for index in order if request.min_score is None or reported[index] >= request.min_score]


def reported_scores(request: CohereRequest | TeiRequest, scores: list[float], calibration: Calibration | None,
                    uncalibrated: Callable[[np.ndarray], np.ndarray]) -> list[float]:
    """The scores an answer gives: the deployed ranker's ``scores`` with ``raw_scores``, else their calibrated
    probabilities where the export carries a calibration, else ``uncalibrated(scores)`` (each API's own)."""
    if request.raw_scores:
        return scores
    values = np.asarray(scores)
    return (calibration.probabilities(values) if calibration is not None else uncalibrated(values)).tolist()


def _cohere_answer(version: str) -> Answer:
    def answer(request: CohereRequest, scores: list[float], calibration: Calibration | None) -> dict[str, Any]:
        reported = reported_scores(request, scores, calibration, lambda values: values)
        texts = request.texts
        results = [{"index": index, "relevance_score": reported[index],
                    **({"document": {"text": texts[index]}} if request.return_documents else {})}
                   for index in _ranked(request, scores, reported)[: request.top_n]]
        return {"id": str(uuid.uuid4()), "results": results,
                "meta": {"api_version": {"version": version}, "billed_units": {"search_units": 1}}}
    return answer


def _tei_answer(request: TeiRequest, scores: list[float], calibration: Calibration | None) -> list[dict[str, Any]]:
    """Scores as text-embeddings-inference gives them (the sigmoid of the model's score) where the export carries
    no calibration."""
    reported = reported_scores(request, scores, calibration, sigmoid)
    return [{"index": index, "score": reported[index],
             **({"text": request.texts[index]} if request.return_text else {})}
            for index in _ranked(request, scores, reported)]
