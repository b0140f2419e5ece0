"""Scoring on a CPU: rerank's float32, bf16 and int8 against sentence-transformers' CPU backends, in one run.

Every path scores the same requests, one at a time as a server receives them: a judged query and its first-stage
top ``N`` (``--documents``, 10 and 100 by default), at rows of each ``--rows`` (128 and 256 tokens). A path's
pairs/s is the best of ``--repeats`` passes over the requests; its nDCG@10 is of its re-ranked requests. The paths:

- ``rerank float32``, ``rerank bf16`` (autocast), ``rerank int8`` (PyTorch's dynamic quantization, per output
  channel): ``rerank.Reranker`` with its ``precision``;
- ``st torch``, ``st onnx`` (float32), ``st onnx int8`` (its ``export_dynamic_quantized_onnx_model``, AVX512-VNNI),
  ``st openvino`` (float32) and ``st openvino int8`` (static int8 as its ``export_static_quantized_openvino_model``
  makes it, through ``optimum-intel``'s ``OVQuantizer``, calibrated on the requests' pairs rather than on GLUE's
  sentences): ``sentence_transformers.CrossEncoder`` on the same folder. A backend whose package is not
  installed (``pip install "sentence-transformers[onnx,openvino]"``) is reported as skipped, with why.

Each path's rate is also given as the operations a second it reaches: 2 x (the encoder's weights) multiply-adds per
token of the rows it scored, plus attention's, against this CPU's float32 and int8 peaks as a large matrix product
measures them (``torch.mm`` in float32, ``torch._int_mm`` in int8).

    python scripts/benchmarks/bench_cpu_scoring.py --model runs/cranfield/model --config cranfield.yaml \\
        --run runs/cranfield/first_stage.trec --json docs/experiments/bench_cpu_scoring.json

``--dry-run`` runs every path once on two requests (the test suite's check that the script works).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from rerank import (
    ONNX,
    Collection,
    CrossEncoderModel,
    Reranker,
    as_collection_config,
    config_settings,
    cpu_flags,
    evaluate,
    export_onnx,
    read_run,
)

Scorer = Callable[[str, list[str]], list[float]]
OV_INT8 = "openvino_model_qint8_quantized"
"""The name of the static int8 OpenVINO model in the folder's ``openvino/`` (as sentence-transformers names it)."""


def requests(collection: Collection, run_file: Path, documents: int,
             queries: int | None) -> list[tuple[str, list[str]]]:
    """``(query id, its first-stage top documents)`` of the judged queries of ``run_file``."""
    run = read_run(run_file)
    judged = sorted((qid for qid in run if qid in collection.qrels), key=lambda qid: (len(qid), qid))[:queries]
    return [(qid, sorted(run[qid], key=lambda doc: (-run[qid][doc], doc))[:documents]) for qid in judged]


def rerank_paths(folder: Path, rows: int, untrained_head: bool) -> dict[str, Callable[[], Scorer]]:
    budget = CrossEncoderModel.from_pretrained(str(folder)).tokenization.max_query_length
    def reranker(precision: str) -> Callable[[], Scorer]:
        def build() -> Scorer:  # the pure cross-encoder: the paths differ in precision only
            scorer = Reranker.from_pretrained(str(folder), ranker="reranker", precision=precision, device="cpu",
                                              untrained_head=untrained_head, max_length=rows,
                                              max_query_length=min(budget, rows // 2))
            return scorer.score
        return build
    return {"rerank float32": reranker("32"), "rerank bf16": reranker("bf16"), "rerank int8": reranker("int8")}


def st_paths(folder: Path, rows: int, calibration: list[tuple[str, str]]) -> dict[str, Callable[[], Scorer]]:
    def cross_encoder(**kwargs: object) -> Callable[[], Scorer]:
        def build() -> Scorer:
            from sentence_transformers import CrossEncoder

            model = CrossEncoder(str(folder), max_length=rows, device="cpu", **kwargs)
            return lambda query, docs: model.predict([(query, doc) for doc in docs], batch_size=32).tolist()
        return build

    def onnx_int8() -> Scorer:
        from sentence_transformers import CrossEncoder, export_dynamic_quantized_onnx_model

        model = CrossEncoder(str(folder), backend="onnx", max_length=rows, device="cpu")
        export_dynamic_quantized_onnx_model(model, "avx512_vnni", str(folder))
        return cross_encoder(backend="onnx", model_kwargs={"file_name": "onnx/model_qint8_avx512_vnni.onnx"})()

    def openvino_int8() -> Scorer:
        from datasets import Dataset
        from optimum.intel import OVConfig, OVQuantizationConfig, OVQuantizer
        from sentence_transformers import CrossEncoder

        model = CrossEncoder(str(folder), backend="openvino", max_length=rows, device="cpu")
        queries, docs = zip(*calibration, strict=True)
        pairs = Dataset.from_dict(dict(model.tokenizer(list(queries), list(docs), padding="max_length",
                                                       max_length=rows, truncation="longest_first")))
        with tempfile.TemporaryDirectory() as quantized:
            OVQuantizer.from_pretrained(model.transformers_model).quantize(
                pairs, save_directory=quantized,
                ov_config=OVConfig(quantization_config=OVQuantizationConfig(num_samples=len(calibration))))
            (folder / "openvino").mkdir(exist_ok=True)
            for suffix in (".xml", ".bin"):
                shutil.move(Path(quantized, "openvino", f"openvino_model{suffix}"),
                            folder / "openvino" / f"{OV_INT8}{suffix}")
        return cross_encoder(backend="openvino", model_kwargs={"file_name": f"openvino/{OV_INT8}.xml"})()

    return {"st torch": cross_encoder(), "st onnx": cross_encoder(backend="onnx"), "st onnx int8": onnx_int8,
            "st openvino": cross_encoder(backend="openvino"), "st openvino int8": openvino_int8}


def timed(score: Scorer, requests_: Sequence[tuple[str, list[str]]], repeats: int) -> tuple[float, list[list[float]]]:
    """The best pass's seconds over the requests, and the scores of the last pass."""
    best, scores = float("inf"), []
    for _ in range(repeats):
        started = time.perf_counter()
        scores = [score(query, docs) for query, docs in requests_]
        best = min(best, time.perf_counter() - started)
    return best, scores


def peaks(size: int = 1024) -> dict[str, float]:
    """This CPU's float32 and int8 matrix-product rates (operations a second), from ``size``-square products."""
    a = torch.randn(size, size)
    rates = {}
    b = torch.randint(-128, 127, (size, size), dtype=torch.int8)
    for name, product, operands in (("float32", torch.mm, (a, a)), ("int8", torch._int_mm, (b, b))):
        try:
            product(*operands)
            started = time.perf_counter()
            for _ in range(5):
                product(*operands)
            rates[name] = 5 * 2 * size**3 / (time.perf_counter() - started)
        except RuntimeError as error:  # an operation this build lacks
            rates[name] = float("nan")
            print(f"{name} peak not measured: {error}")
    return rates


def operations_per_pair(model: CrossEncoderModel, tokens: float) -> float:
    """Multiply-adds (x2) of one row of ``tokens`` tokens: the encoder's weights per token, and attention's."""
    config = model.model.config
    weights = sum(p.numel() for name, p in model.model.named_parameters() if "embeddings" not in name)
    attention = 2 * tokens * config.hidden_size * config.num_hidden_layers
    return 2 * tokens * (weights + attention)


def row_tokens(model: CrossEncoderModel, pairs: list[tuple[str, str]], rows: int) -> float:
    encoded = model.tokenizer([q for q, _ in pairs], [d for _, d in pairs], truncation="only_second",
                              max_length=rows)
    return sum(len(ids) for ids in encoded["input_ids"]) / max(len(pairs), 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="an exported folder (rerank fit's model/)")
    parser.add_argument("--config", default="cranfield.yaml", help="the config whose data.collection the run is of")
    parser.add_argument("--run", type=Path, required=True, help="the first-stage run the requests come from")
    parser.add_argument("--documents", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rows", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--queries", type=int, default=None, help="the first judged queries (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="each path once on two requests")
    parser.add_argument("--untrained_head", action="store_true", help="time a model without a trained head")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.queries, args.repeats, args.documents, args.rows = 2, 1, [5], [64]
    collection = Collection(as_collection_config(config_settings(args.config)["data"]["collection"],
                                                 "data.collection"))
    work = Path(tempfile.mkdtemp(prefix="bench-cpu-scoring-"))
    folder = work / "model"
    shutil.copytree(args.model, folder)
    config = json.loads((folder / "config.json").read_text())  # every path timed, whatever the export's gates say:
    gates = config.get("rerank", {}).pop("fast_scoring", None)  # they are reported beside
    (folder / "config.json").write_text(json.dumps(config))
    model = CrossEncoderModel.from_pretrained(str(folder))
    if not (folder / ONNX).is_file():
        (folder / ONNX).parent.mkdir(exist_ok=True)
        export_onnx(model, folder / ONNX)
    rates = peaks(256 if args.dry_run else 1024)
    results = []
    for documents in args.documents:
        asked = requests(collection, args.run, documents, args.queries)
        texts = [(collection.queries[qid], [collection.documents.text(doc) for doc in docs]) for qid, docs in asked]
        pairs = [(query, doc) for query, docs in texts for doc in docs]
        for rows in args.rows:
            tokens = row_tokens(model, pairs, rows)
            paths = {**rerank_paths(folder, rows, args.untrained_head), **st_paths(folder, rows, pairs[:200])}
            for name, build in paths.items():
                row = {"path": name, "documents": documents, "rows": rows}
                try:
                    score = build()
                except Exception as error:
                    results.append(row | {"skipped": _reason(error)})
                    continue
                seconds, scores = timed(score, texts, args.repeats)
                run = {qid: dict(zip(docs, values)) for (qid, docs), values in zip(asked, scores)}
                ndcg = evaluate(run, {qid: collection.qrels[qid] for qid, _ in asked}, ["nDCG@10"]).mean["nDCG@10"]
                per_second = len(pairs) / seconds
                results.append(row | {"pairs_per_second": per_second, "nDCG@10": ndcg,
                                      "operations_per_second": per_second * operations_per_pair(model, tokens),
                                      "tokens_per_row": tokens})
    record = recorded(rates, sys.argv[1:] if argv is None else argv, gates, results)
    show(record)
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def recorded(rates: dict[str, float], argv: list[str], gates: object, results: list[dict]) -> dict:
    """The run's record: the machine, the libraries' versions, the command, the export's gates and the rows."""
    return {"machine": {"processor": platform.processor() or platform.machine(), "cores": torch.get_num_threads(),
                        "flags": cpu_flags(), "peaks": rates},
            "versions": {name: _version(name) for name in ("torch", "onnxruntime", "sentence-transformers",
                                                           "openvino", "optimum-intel", "transformers")},
            "command": " ".join(["python scripts/benchmarks/bench_cpu_scoring.py", *argv]), "gates": gates,
            "results": results}


def _reason(error: Exception) -> str:
    """Why a backend was skipped, without this machine's paths."""
    return re.sub(r"\s*\(/[^)]*\)", "", f"{type(error).__name__}: {error}")[:200]


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def show(record: dict) -> None:
    table = Table(title="pairs/s, one request at a time; nDCG@10 of the re-ranked requests")
    for column in ("path", "documents", "rows", "pairs/s", "vs rerank float32", "nDCG@10", "GOP/s"):
        table.add_column(column)
    base = {(r["documents"], r["rows"]): r["pairs_per_second"] for r in record["results"]
            if r["path"] == "rerank float32" and "pairs_per_second" in r}
    for r in record["results"]:
        if "skipped" in r:
            table.add_row(r["path"], str(r["documents"]), str(r["rows"]), "skipped", "", "", r["skipped"][:60])
            continue
        table.add_row(r["path"], str(r["documents"]), str(r["rows"]), f"{r['pairs_per_second']:.1f}",
                      f"{r['pairs_per_second'] / base.get((r['documents'], r['rows']), float('nan')):.2f}x",
                      f"{r['nDCG@10']:.4f}",
                      f"{r['operations_per_second'] / 1e9:.0f}")
    Console().print(table)
    peaks_ = record["machine"]["peaks"]
    print(f"peaks: float32 {peaks_['float32'] / 1e9:.0f} GFLOP/s, int8 {peaks_['int8'] / 1e9:.0f} GOP/s")


if __name__ == "__main__":
    main()
