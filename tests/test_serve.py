"""``rerank serve`` as a search stack meets it: a server started in a subprocess on a free port, called over HTTP by
httpx and by the cohere SDK, never through its functions. Scores are checked against ``Reranker.rerank`` on the
same export (pure, interpolated, fused), a tiny random BERT keeping it fast."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers import MINILM_VOCAB, load_script, tiny_bert, tiny_bi_encoder

from rerank.config.teacher import TeacherConfig
from rerank.config.tokenization import TokenizationConfig
from rerank.core.hardware import cpu_has_int8_dot
from rerank.evaluation.calibration import Calibration
from rerank.inference.export import export
from rerank.inference.fast_scoring import Gate
from rerank.inference.reranker import Reranker
from rerank.model.cross_encoder import CrossEncoderModel
from rerank.ranker.deployment import Deployment

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared (MiniLM's vocabulary, Cranfield)")
QUERY = "wind tunnel heat flux"
DOCUMENTS = ["heat flux to blunt bodies in a wind tunnel", "similarity laws", "aircraft model query document",
             "wind wind wind", "the tunnel", "document about heat and aircraft similarity laws"]
SCORES = [12.5, 3.0, 7.25, 9.0, 1.5, 4.0]
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model exported three times: deploying the pure cross-encoder, ``interpolated`` and ``fused``."""
    root = tmp_path_factory.mktemp("serve")
    model = CrossEncoderModel.from_pretrained(str(tiny_bert(root / "bert", real_vocabulary=True)),
                                              tokenization=TokenizationConfig(32, 8))
    teacher = TeacherConfig(bi_encoder=str(tiny_bi_encoder(root / "teacher")), first_stage_weight=0.4)
    deployments = {"reranker": Deployment(),
                   "interpolated": Deployment("interpolated", {"reranker": 0.7, "first_stage": 0.3}),
                   "fused": Deployment("fused", {"reranker": 0.5, "teacher": 0.3, "first_stage": 0.2}, teacher)}
    return {name: export(model, root / name, deployment=deployment) for name, deployment in deployments.items()}


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    output: list[str]

    def post(self, path: str, body: object, **options: object) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, **{"timeout": 60, **options})

    def info(self) -> dict:
        return httpx.get(f"{self.url}/info", timeout=10).json()


@contextmanager
def serving(model: Path, *options: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    """``rerank serve`` on a free port of 127.0.0.1, once ready; stopped (SIGTERM) afterwards."""
    command = [sys.executable, "-m", "rerank", "serve", "--model.model_name", str(model), "--serve.port", "0",
               *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    try:
        first = process.stdout.readline()
        while first and " on http://" not in first:
            output.append(first)
            first = process.stdout.readline()
        assert first, "".join(output)
        output.append(first)
        reader.start()
        url = first.split(" on ")[-1].split()[0]
        deadline = time.monotonic() + 120
        while httpx.get(f"{url}/ready", timeout=10).status_code != 200:
            assert time.monotonic() < deadline and process.poll() is None, "".join(output)
            time.sleep(0.1)
        yield Server(url, process, output)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        reader.join(timeout=10)


@pytest.fixture(scope="module")
def servers(exports: dict[str, Path]) -> Iterator[dict[str, Server]]:
    with serving(exports["reranker"]) as pure, serving(exports["interpolated"]) as interpolated, \
            serving(exports["fused"]) as fused:
        yield {"reranker": pure, "interpolated": interpolated, "fused": fused}


def expected(model: Path, documents: list[str] = DOCUMENTS, scores: list[float] = SCORES) -> list[float]:
    """What the Python API gives for the same query and documents."""
    reranker = Reranker.from_pretrained(str(model))
    needs = reranker.deployment.needs_first_stage
    return reranker.score(QUERY, documents, first_stage_scores=scores if needs else None)


@pytest.mark.parametrize("ranker", ["reranker", "interpolated", "fused"])
def test_scores_over_http_are_the_python_apis(ranker: str, exports: dict[str, Path],
                                              servers: dict[str, Server]) -> None:
    server, reference = servers[ranker], expected(exports[ranker])
    order = sorted(range(len(DOCUMENTS)), key=lambda i: (-reference[i], i))
    body = {"query": QUERY, "documents": DOCUMENTS, "first_stage_scores": SCORES}
    for version in ("v1", "v2"):
        answer = server.post(f"/{version}/rerank", {**body, "model": "rerank", "top_n": 4, "return_documents": True})
        assert answer.status_code == 200 and answer.headers["x-rerank-ranker"] == ranker
        results = answer.json()["results"]
        assert [result["index"] for result in results] == order[:4]  # best first, top_n of them
        for result in results:
            assert abs(result["relevance_score"] - reference[result["index"]]) <= TOLERANCE
            assert result["document"] == {"text": DOCUMENTS[result["index"]]}
        assert answer.json()["meta"]["api_version"] == {"version": version[1]}
    tei = server.post("/rerank", {"query": QUERY, "texts": DOCUMENTS, "first_stage_scores": SCORES,
                                  "raw_scores": True, "return_text": True}).json()
    assert [rank["index"] for rank in tei] == order
    assert all(abs(rank["score"] - reference[rank["index"]]) <= TOLERANCE for rank in tei)
    assert all(rank["text"] == DOCUMENTS[rank["index"]] for rank in tei)
    squashed = server.post("/rerank", {"query": QUERY, "texts": DOCUMENTS, "first_stage_scores": SCORES}).json()
    assert all(abs(rank["score"] - 1 / (1 + math.exp(-reference[rank["index"]]))) <= TOLERANCE and "text" not in rank
               for rank in squashed)  # text-embeddings-inference's default: the sigmoid of the score
    info = server.info()
    assert info["ranker"] == ranker and info["needs_first_stage_scores"] == (ranker != "reranker")
    assert info["max_length"] == 32 and info["max_query_length"] == 8 and info["limits"]["max_documents"] == 1000
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_concurrent_requests_are_batched_together_and_keep_their_scores(exports: dict[str, Path]) -> None:
    requests = [(DOCUMENTS[: 1 + i % len(DOCUMENTS)], SCORES[: 1 + i % len(DOCUMENTS)]) for i in range(12)]
    references = [expected(exports["fused"], documents, scores) for documents, scores in requests]

    async def send(url: str, order: list[int]) -> dict[int, list[float]]:
        async with httpx.AsyncClient(timeout=60) as client:
            answers = await asyncio.gather(*(client.post(f"{url}/rerank", json={
                "query": QUERY, "texts": requests[i][0], "first_stage_scores": requests[i][1], "raw_scores": True})
                for i in order))
        return {i: [rank["score"] for rank in sorted(answer.json(), key=lambda rank: rank["index"])]
                for i, answer in zip(order, answers)}

    with serving(exports["fused"], "--serve.max_wait_ms", "300", "--serve.batch_pairs", "20",
                 "--serve.remember", "4") as server:
        for order in (list(range(12)), list(reversed(range(12))), [0, 5, 1, 7, 2, 11]):  # other batch compositions
            before = server.info()["scored"]
            scores = asyncio.run(send(server.url, order))
            after = server.info()["scored"]
            assert after["requests"] - before["requests"] == len(order)
            assert after["batches"] - before["batches"] < len(order)  # requests shared batches
            for i in order:
                assert max(abs(a - b) for a, b in zip(scores[i], references[i])) <= TOLERANCE
            # the teacher keeps the embeddings of the last 4 distinct documents it saw: seen ones are not embedded
            # again, and the scores stay those of a fresh embedding (above)
            assert server.info()["remembered_documents"] == 4


BAD_REQUESTS = [  # path, body (bytes as sent), status, words the error must contain
    ("/v1/rerank", b"{\"query\": \"wind\", \"documents\": [", 400, "not JSON"),
    ("/rerank", b"{\"query\": \"wind\", \"texts\": [", 400, "not JSON"),
    ("/v2/rerank", b"{\"documents\": [\"a\"]}", 400, "query: Field required"),
    ("/v2/rerank", b"{\"query\": \"  \", \"documents\": [\"a\"]}", 400, "query: must not be empty"),
    ("/rerank", b"{\"texts\": [\"a\"]}", 422, "query: Field required"),
    ("/v2/rerank", b"{\"query\": \"wind\", \"documents\": []}", 400, "documents: give at least one document"),
    ("/rerank", b"{\"query\": \"wind\"}", 422, "texts: Field required"),
    ("/v2/rerank", b"{\"query\": \"wind\", \"documents\": [\"a\", 7]}", 400, "documents[1]"),
    ("/rerank", b"{\"query\": \"wind\", \"texts\": [\"a\", null]}", 422, "texts[1]: Input should be a valid string"),
    ("/v1/rerank", b"{\"query\": \"wind\", \"documents\": [\"a\"], \"top_k\": 2}", 400, "top_k: unknown field"),
    ("/rerank", b"{\"query\": \"wind\", \"texts\": [\"a\"], \"rawscores\": true}", 422, "rawscores: unknown field"),
    ("/rerank", b"{\"query\": \"wind\", \"texts\": [\"a\"], \"min_score\": \"high\"}", 422,
     "min_score: Input should be a valid number"),
    ("/v2/rerank", b"{\"query\": \"wind\", \"documents\": [\"a\", \"b\"], \"first_stage_scores\": [1]}", 400,
     "first_stage_scores: 1 scores for 2 documents"),
    ("/rerank", b"{\"query\": \"wind\", \"texts\": [\"a\"], \"first_stage_scores\": [\"high\"]}", 422,
     "first_stage_scores[0]: Input should be a valid number"),
    ("/v2/rerank", b"{\"query\": \"wind\", \"documents\": [\"a\"], \"first_stage_scores\": [NaN]}", 400,
     "first_stage_scores[0]: Input should be a finite number"),
    ("/v2/rerank", b"{\"query\": \"wind \xff\", \"documents\": [\"a\"]}", 400, "not UTF-8"),
    ("/v2/rerank", b"[\"wind\"]", 400, "must be a JSON object"),
    ("/v2/rerank", json.dumps({"query": "wind", "documents": ["a"] * 7}).encode(), 400,
     "documents: 7 documents; this server takes at most 6"),
    ("/rerank", json.dumps({"query": "wind", "texts": ["a"] * 7}).encode(), 413, "at most 6 a request"),
    ("/rerank", json.dumps({"query": "wind", "texts": ["a " * 3000]}).encode(), 413, "max_body_bytes"),
    ("/v2/rerank", json.dumps({"query": "wind", "documents": ["a"]}).encode(), 422,
     "first_stage_scores: this server deploys"),
    ("/rerank", json.dumps({"query": "wind", "texts": ["a", "heat " * 40], "truncate": False,
                            "first_stage_scores": [1, 2]}).encode(), 422, "texts[1]: longer than the 32-token row"),
    ("/rerank", json.dumps({"query": "wind " * 9, "texts": ["a"], "truncate": False,
                            "first_stage_scores": [1]}).encode(), 422, "query: longer than the 8 tokens"),
]


def test_bad_requests_are_refused_naming_the_field_and_the_server_keeps_serving(exports: dict[str, Path]) -> None:
    reference = expected(exports["interpolated"])
    good = {"query": QUERY, "documents": DOCUMENTS, "first_stage_scores": SCORES}
    with serving(exports["interpolated"], "--serve.max_documents", "6", "--serve.max_body_bytes", "4096") as server:
        for path, body, status, words in BAD_REQUESTS:
            answer = httpx.post(f"{server.url}{path}", content=body, timeout=60,
                                headers={"content-type": "application/json"})
            error = answer.json()
            message = error["message"] if path.startswith("/v") else error["error"]
            assert answer.status_code == status and words in message, (path, body, answer.status_code, error)
            assert path.startswith("/v") or error["error_type"]
            after = server.post("/v2/rerank", good)  # the next good request is answered, and right
            assert after.status_code == 200
            assert all(abs(r["relevance_score"] - reference[r["index"]]) <= TOLERANCE for r in after.json()["results"])
        cut = server.post("/rerank", {"query": "wind " * 9, "texts": ["heat " * 40], "first_stage_scores": [1.0],
                                      "raw_scores": True})  # truncate unset: cut as the model cuts (as predict does)
        reranker = Reranker.from_pretrained(str(exports["interpolated"]))
        assert abs(cut.json()[0]["score"] - reranker.score("wind " * 9, ["heat " * 40], [1.0])[0]) <= TOLERANCE
    assert server.process.returncode == 0


def test_a_full_queue_is_refused_with_503_and_retry_after(exports: dict[str, Path]) -> None:
    with serving(exports["reranker"], "--serve.max_documents", "8", "--serve.max_queue_pairs", "10",
                 "--serve.max_wait_ms", "1500", "--serve.batch_pairs", "100") as server:
        waiting: list[httpx.Response] = []
        first = threading.Thread(target=lambda: waiting.append(server.post("/v2/rerank", {
            "query": QUERY, "documents": DOCUMENTS})))
        first.start()
        deadline = time.monotonic() + 30
        while server.info()["queued_pairs"] == 0:  # the first request waits in the queue for others to join it
            assert time.monotonic() < deadline
            time.sleep(0.02)
        full = server.post("/v2/rerank", {"query": QUERY, "documents": DOCUMENTS})
        assert full.status_code == 503 and full.headers["retry-after"] == "1" and "capacity" in full.json()["message"]
        first.join()
        assert waiting[0].status_code == 200 and len(waiting[0].json()["results"]) == len(DOCUMENTS)
        assert server.post("/v2/rerank", {"query": QUERY, "documents": DOCUMENTS}).status_code == 200


def test_sigterm_lets_requests_in_flight_finish_then_exits_0(exports: dict[str, Path]) -> None:
    reference = expected(exports["reranker"])
    with serving(exports["reranker"], "--serve.max_wait_ms", "1500", "--serve.batch_pairs", "100") as server:
        answers: list[httpx.Response] = []
        flying = [threading.Thread(target=lambda: answers.append(server.post("/rerank", {
            "query": QUERY, "texts": DOCUMENTS, "raw_scores": True}))) for _ in range(3)]
        for thread in flying:
            thread.start()
        deadline = time.monotonic() + 30
        while server.info()["queued_pairs"] < 3 * len(DOCUMENTS):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        for thread in flying:
            thread.join()
        assert server.process.wait(timeout=60) == 0
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    for answer in answers:
        assert all(abs(rank["score"] - reference[rank["index"]]) <= TOLERANCE for rank in answer.json())
    assert "rerank serve: stopped" in "".join(server.output)


def test_a_client_that_goes_away_costs_nothing(exports: dict[str, Path]) -> None:
    with serving(exports["reranker"], "--serve.max_wait_ms", "1500", "--serve.batch_pairs", "100") as server:
        with pytest.raises(httpx.TimeoutException):  # it hangs up while its request waits for a batch
            server.post("/v2/rerank", {"query": QUERY, "documents": DOCUMENTS}, timeout=0.3)
        time.sleep(2)  # past the batch's wait: its pairs would have been scored by now
        assert server.info()["scored"] == {"requests": 0, "batches": 0, "pairs": 0}
        assert server.post("/v2/rerank", {"query": QUERY, "documents": DOCUMENTS}).status_code == 200
        assert server.info()["scored"] == {"requests": 1, "batches": 1, "pairs": len(DOCUMENTS)}


def test_the_cohere_sdk_drives_the_server(exports: dict[str, Path], servers: dict[str, Server]) -> None:
    cohere = pytest.importorskip("cohere")
    reference = expected(exports["reranker"])
    order = sorted(range(len(DOCUMENTS)), key=lambda i: (-reference[i], i))
    url = servers["reranker"].url
    v2 = cohere.ClientV2(api_key="unused", base_url=url).rerank(model="rerank", query=QUERY, documents=DOCUMENTS,
                                                                top_n=3)
    assert [result.index for result in v2.results] == order[:3]
    assert all(abs(result.relevance_score - reference[result.index]) <= TOLERANCE for result in v2.results)
    v1 = cohere.Client(api_key="unused", base_url=url).rerank(query=QUERY, documents=[{"text": d} for d in DOCUMENTS],
                                                             return_documents=True)
    assert [(result.index, result.document.text) for result in v1.results] == [(i, DOCUMENTS[i]) for i in order]
    with pytest.raises(cohere.errors.BadRequestError):
        cohere.ClientV2(api_key="unused", base_url=url).rerank(model="rerank", query="", documents=DOCUMENTS)


def test_a_wrong_model_or_a_taken_port_fails_in_one_line(exports: dict[str, Path], servers: dict[str, Server],
                                                        tmp_path: Path) -> None:
    def fails(*options: str) -> str:
        done = subprocess.run([sys.executable, "-m", "rerank", "serve", *options], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        return next(line for line in done.stderr.splitlines() if line.startswith("error: "))

    assert str(tmp_path / "nowhere") in fails("--model.model_name", str(tmp_path / "nowhere"))
    port = servers["reranker"].url.rsplit(":", 1)[1]
    assert f"--serve.port {port}" in fails("--model.model_name", str(exports["reranker"]), "--serve.port", port)
    assert "--serve.max_wait_ms: max_wait_ms must be >= 0; got -1.0" in fails(
        "--model.model_name", str(exports["reranker"]), "--serve.max_wait_ms", "-1")


def test_the_load_script_measures_the_servers_on_tiny_inputs(exports: dict[str, Path], tmp_path: Path) -> None:
    report = load_script("bench_serve").main([
        "--model", str(exports["fused"]), "--documents", "3", "--clients", "1", "3", "--queries", "4",
        "--requests", "2", "--seconds", "30", "--repeats", "2", "--logs", str(tmp_path / "logs"),
        "--output", str(tmp_path / "report.json")])
    assert json.loads((tmp_path / "report.json").read_text()) == report
    servers = [(r["server"], r["clients"], r["requests"]) for r in report["rounds"]]
    deployed = report["deployed"]
    assert deployed.startswith("fused (")
    assert servers == [(f"rerank serve ({name})", clients, requests) for name in
                       ("pure", f"{deployed}, new documents", f"{deployed}, documents seen before")
                       for clients, requests in ((1, 2), (3, 6))]
    assert all(r["pairs_per_second"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] for r in report["rounds"])
    # every answer was checked against the offline scores of its ranker
    assert set(report["offline"]) == {"reranker 3", "deployed 3", "new documents 3"}


def test_an_encoder_without_a_head_is_refused_and_served_only_when_asked_saying_so(tmp_path: Path,
                                                                                   servers: dict[str, Server]) -> None:
    raw = tiny_bert(tmp_path / "raw", real_vocabulary=True)
    refused = subprocess.run([sys.executable, "-m", "rerank", "serve", "--model.model_name", str(raw),
                              "--serve.port", "0"], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert [line for line in refused.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {raw}: its weights hold no scoring head, so its scores would come from a freshly initialised, "
        "untrained one: give the folder rerank fit exports (OUTPUT/model) or a cross-encoder with a trained head "
        "(e.g. cross-encoder/ms-marco-MiniLM-L6-v2); to score this encoder with an untrained head on purpose, pass "
        "--untrained_head (Python: untrained_head=True)"]
    with serving(raw, "--untrained_head", "true") as server:
        assert "with an untrained head: its scores rank at random" in "".join(server.output)
        assert server.info()["untrained_head"] is True
        for path, body in (("/rerank", {"query": QUERY, "texts": DOCUMENTS}),
                           ("/v2/rerank", {"query": QUERY, "documents": DOCUMENTS})):
            answer = server.post(path, body)
            assert answer.status_code == 200 and answer.headers["x-rerank-untrained-head"] == "true"
    trained = servers["reranker"]  # an export holds its head: nothing said
    assert trained.info()["untrained_head"] is False
    assert "x-rerank-untrained-head" not in trained.post("/rerank", {"query": QUERY, "texts": DOCUMENTS}).headers


def test_a_job_that_fails_in_a_batch_fails_alone() -> None:
    """A batch whose scoring raises is scored again job by job: the failing job gets the error, the others their
    scores."""
    from rerank.inference.serving.batching import Batcher, Job

    def score(jobs: list[Job]) -> list[list[float]]:
        if any(job.query == "poison" for job in jobs):
            raise RuntimeError("cannot score poison")
        return [[float(len(text)) for text in job.documents] for job in jobs]

    batcher = Batcher(score, batch_pairs=100, max_wait=0.3, max_queue_pairs=1000)
    jobs = [Job("poison" if i == 3 else f"q{i}", ["a", "bb", "ccc"][: 1 + i % 3]) for i in range(8)]
    futures = [batcher.submit(job) for job in jobs]
    for i, (job, future) in enumerate(zip(jobs, futures)):
        if i == 3:
            with pytest.raises(RuntimeError, match="poison"):
                future.result(timeout=30)
        else:
            assert future.result(timeout=30) == [float(len(text)) for text in job.documents]
    batcher.close()
    assert batcher.scored["requests"] == 7


def test_generated_requests_never_fail_the_server_nor_change_a_good_answer(exports: dict[str, Path]) -> None:
    """Requests generated from the server's own OpenAPI schema (schemathesis: bodies that follow it, and bodies
    that break it), a bounded number per route: never a 5xx, every answer and error in its declared shape, and a
    fixed good request answered the same before and after."""
    schemathesis = pytest.importorskip("schemathesis")
    good = {"query": QUERY, "documents": DOCUMENTS, "first_stage_scores": SCORES}
    with serving(exports["fused"], "--serve.max_documents", "20", "--serve.max_body_bytes", "65536") as server:
        before = server.post("/v2/rerank", good).json()["results"]
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        operations = {result.ok().label: result.ok() for result in schema.get_all_operations()}
        assert {"POST /v1/rerank", "POST /v2/rerank", "POST /rerank", "GET /info"} <= set(operations)
        assert operations["POST /rerank"].definition.raw["requestBody"]["content"]["application/json"]["schema"]
        failures: list[str] = []
        for label, operation in operations.items():
            modes = [schemathesis.GenerationMode.POSITIVE]
            if label.startswith("POST"):
                modes.append(schemathesis.GenerationMode.NEGATIVE)
            for mode in modes:
                failures += generated_failures(operation, mode, server.url)
        assert failures == []
        after = server.post("/v2/rerank", good).json()["results"]
        assert after == before
        assert server.process.poll() is None


def generated_failures(operation: object, mode: object, url: str, examples: int = 25) -> list[str]:
    """``examples`` requests that schemathesis draws for ``operation`` in ``mode``, each checked: no 5xx, the status,
    content type and body its schema declares (a request that follows the schema may still be refused: documents
    and scores of unequal lengths)."""
    from hypothesis import HealthCheck, given, settings
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    failures: list[str] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def call(case: object) -> None:
        response = case.call(base_url=url, timeout=30)  # no hang: each answered within 30 s
        try:
            case.validate_response(response, excluded_checks=[positive_data_acceptance])
        except Exception as failure:
            failures.append(f"{operation.label} {mode.value}: {response.status_code} {str(failure)[:300]}")

    call()
    return failures


def test_a_server_with_an_api_key_answers_only_requests_that_carry_it(exports: dict[str, Path]) -> None:
    """The key from RERANK_API_KEY: the cohere SDK with it re-ranks, with another it is refused (401, in each API's
    error shape); health and readiness stay open to a load balancer; the key is in no log line nor in /info."""
    cohere = pytest.importorskip("cohere")
    key = "s3cret-key-of-the-gateway"
    with serving(exports["reranker"], env={"RERANK_API_KEY": key}) as server:
        answer = cohere.ClientV2(api_key=key, base_url=server.url).rerank(model="rerank", query=QUERY,
                                                                          documents=DOCUMENTS, top_n=2)
        assert len(answer.results) == 2
        with pytest.raises(cohere.errors.UnauthorizedError):
            cohere.ClientV2(api_key="wrong", base_url=server.url).rerank(model="rerank", query=QUERY,
                                                                         documents=DOCUMENTS)
        for path, body, shape in (("/v1/rerank", {"query": QUERY, "documents": DOCUMENTS}, {"message"}),
                                  ("/rerank", {"query": QUERY, "texts": DOCUMENTS}, {"error", "error_type"})):
            refused = server.post(path, body)
            assert refused.status_code == 401 and set(refused.json()) == shape
            assert refused.headers["www-authenticate"] == "Bearer"
            assert server.post(path, body, headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert httpx.get(f"{server.url}/info", timeout=10).status_code == 401
        info = httpx.get(f"{server.url}/info", headers={"Authorization": f"Bearer {key}"}, timeout=10).json()
        assert info["api_key"] is True and key not in json.dumps(info)
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        assert httpx.get(f"{server.url}/ready", timeout=10).status_code == 200
    assert key not in "".join(server.output)


def test_precision_auto_serves_the_fastest_path_that_passed_its_gate_and_says_so_in_info(
        tmp_path: Path) -> None:
    model = CrossEncoderModel.from_pretrained(str(tiny_bert(tmp_path / "bert", real_vocabulary=True)),
                                              tokenization=TokenizationConfig(32, 8))
    gated = export(model, tmp_path / "gated", gates={"int8": Gate("int8", 0.5, 0.5005, 0.99, 40)})
    fast = cpu_has_int8_dot()  # what auto may pick depends on this CPU: int8 where it has VNNI
    reference = Reranker.from_pretrained(str(gated), precision="int8" if fast else "32", device="cpu")
    with serving(gated, "--serve.precision", "auto", "--serve.device", "cpu") as server:
        info = server.info()
        assert info["precision"] == ("int8" if fast else "32")
        assert ("passed its gate" in info["precision_reason"]) == fast
        assert info["fast_scoring"]["int8"] == {"precision": "int8", "reference": 0.5, "fast": 0.5005, "tau": 0.99,
                                                "queries": 40, "passed": True}
        answer = server.post("/rerank", {"query": QUERY, "texts": DOCUMENTS, "raw_scores": True}).json()
    scores = reference.score(QUERY, DOCUMENTS)
    assert all(abs(rank["score"] - scores[rank["index"]]) <= TOLERANCE for rank in answer)


def test_a_calibrated_export_serves_probabilities_in_both_apis_ranked_as_the_scores_and_cut_at_min_score(
        exports: dict[str, Path], tmp_path: Path) -> None:
    fused = Reranker.from_pretrained(str(exports["fused"]))
    calibration = Calibration("isotonic", {"scores": [-1.0, 0.0, 0.5, 2.0], "probabilities": [0.1, 0.3, 0.3, 0.9]},
                              0.3, {"queries": 40, "pairs": 800, "relevant": 90, "log_loss": {}})
    model = export(fused.model, tmp_path / "calibrated", deployment=fused.deployment, calibration=calibration)
    reranker = Reranker.from_pretrained(str(model))
    raw = reranker.score(QUERY, DOCUMENTS, first_stage_scores=SCORES)
    probabilities = reranker.score(QUERY, DOCUMENTS, first_stage_scores=SCORES, calibrated=True)
    assert probabilities == pytest.approx(np.interp(raw, [-1, 0, 0.5, 2], [0.1, 0.3, 0.3, 0.9]).tolist())
    order = sorted(range(len(DOCUMENTS)), key=lambda i: (-raw[i], i))  # the raw scores' order, probability ties too
    kept = [i for i in order if probabilities[i] >= 0.3]
    assert 0 < len(kept) < len(order)
    python = reranker.rerank(QUERY, DOCUMENTS, first_stage_scores=SCORES, calibrated=True, min_score=0.3)
    assert [index for index, _ in python] == kept
    assert [index for index, _ in reranker.rerank(QUERY, DOCUMENTS, first_stage_scores=SCORES, calibrated=True)] == [
        index for index, _ in reranker.rerank(QUERY, DOCUMENTS, first_stage_scores=SCORES)] == order
    body = {"query": QUERY, "first_stage_scores": SCORES}
    with serving(model) as server:
        info = server.info()["calibration"]
        assert info["applied"] == "isotonic" and info["threshold"] == 0.3 and info["map"] == calibration.as_dict()
        for path, documents, score in (("/v2/rerank", "documents", "relevance_score"), ("/rerank", "texts", "score")):
            answer = server.post(path, {**body, documents: DOCUMENTS}).json()
            ranks = answer["results"] if path != "/rerank" else answer
            assert [rank["index"] for rank in ranks] == order
            assert all(abs(rank[score] - probabilities[rank["index"]]) <= TOLERANCE for rank in ranks)
            cut = server.post(path, {**body, documents: DOCUMENTS, "min_score": 0.3}).json()
            assert [rank["index"] for rank in (cut["results"] if path != "/rerank" else cut)] == kept
            unscaled = server.post(path, {**body, documents: DOCUMENTS, "raw_scores": True}).json()
            ranks = unscaled["results"] if path != "/rerank" else unscaled
            assert all(abs(rank[score] - raw[rank["index"]]) <= TOLERANCE for rank in ranks)
        top = server.post("/v1/rerank", {**body, "documents": DOCUMENTS, "min_score": 0.3, "top_n": 1}).json()
        assert [rank["index"] for rank in top["results"]] == kept[:1]
    assert Reranker.from_pretrained(str(model), ranker="reranker").calibration is None  # the map is the deployed one's
    with pytest.raises(ValueError, match="this reranker has no calibration"):
        Reranker.from_pretrained(str(exports["fused"])).score(QUERY, DOCUMENTS, SCORES, calibrated=True)
