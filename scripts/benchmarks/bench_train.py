"""Training throughput and memory of rerank beside a hand-written loop and sentence-transformers' trainer.

``throughput`` (default): pairs per second over full training steps, in one process, on Cranfield BM25 lists
(one query of ``--list_size`` candidates per step, max length ``--max_length``, ListNet, AdamW):

- (a) rerank: ``RerankModule`` + ``RerankDataModule`` through ``lightning.Trainer``, as a user runs it
  (data loading and tokenization included);
- (b) the floor: a hand-written PyTorch loop (forward, loss, backward, AdamW) over the same batches,
  tokenized beforehand, with the same model and forward (``CrossEncoder``, length-sorted chunks of ``--chunk``):
  what (a) costs beyond it is Lightning's and the data pipeline's;
- (c) ``sentence_transformers.cross_encoder.CrossEncoderTrainer`` with ``ListNetLoss`` on the same lists, model,
  list size, max length and batch.

Also the padding efficiency (real tokens / computed tokens) of rerank's batches, with and without the
length-sorted chunked forward, on Cranfield and NFCorpus candidates.

``profile``: the share of a training step's CPU time taken by each operator (``torch.profiler``).

``memory``: peak RSS of one training step (forward, backward, optimizer) against list size, with and without
gradient checkpointing, each in a fresh process.

``settings``: seconds per training step (forward, ListNet, backward, AdamW; ``--list_size`` rows of ``--lengths``
tokens) of the model as the recipe's settings make it: stock, encoder dropout 0 (``model.encoder_dropout``), frozen
embeddings (``model.freeze_embeddings``), both; the variants take turns in rounds, the median of ``--rounds``.
What the default recipe's stage length was sized with (docs/recipe.md).

``precision``: (a)'s pairs per second in ``32-true`` and ``bf16-mixed``, each in a fresh process, on this processor
and on the instruction sets of processors without bfloat16 arithmetic, emulated by capping oneDNN, ATen and MKL
(``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``, ``MKL_ENABLE_INSTRUCTIONS``): AVX-512 without BF16/AMX
(Skylake to Ice Lake Xeons) and AVX2 (AMD EPYC before Zen 4). What :mod:`rerank.training.precision` decides from.

    python scripts/benchmarks/bench_train.py --steps 12 --output docs/experiments/bench_train.json
    python scripts/benchmarks/bench_train.py memory --sizes 4 16 64 128 --output docs/experiments/bench_memory.json
    python scripts/benchmarks/bench_train.py profile --steps 3
    python scripts/benchmarks/bench_train.py precision --list_size 16 --max_length 192 \\
        --output docs/experiments/bench_precision.json
    python scripts/benchmarks/bench_train.py settings --list_size 16 --lengths 96 128 192 --steps 4 \\
        --output docs/experiments/bench_settings.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import lightning.pytorch as pl
import torch
from rich.console import Console
from rich.table import Table

from rerank import (
    Collection,
    CollectionConfig,
    CrossEncoderModel,
    FirstStageConfig,
    FoldsConfig,
    RerankDataModule,
    RerankModule,
    StepTimer,
    TokenizationConfig,
    TrainingBatch,
    build_loss,
    length_chunks,
    speedups,
    write_run,
)
from rerank import bm25s_search as search

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SHARED = Path(__file__).resolve().parents[3] / "shared"
COLLECTIONS = {
    "cranfield": CollectionConfig(ir_datasets="cranfield", label_map={-1: 0, 1: 4, 2: 3, 3: 2, 4: 1}),
    "nfcorpus": CollectionConfig(docs=str(SHARED / "data/nfcorpus/docs.jsonl"),
                                 queries=str(SHARED / "data/nfcorpus/queries.test.tsv"),
                                 qrels=str(SHARED / "data/nfcorpus/qrels.test.txt")),
}


def first_stage(collection: str, output: Path) -> FirstStageConfig:
    """A bm25s run of the collection's queries that have candidates (NFCorpus has stopword-only queries)."""
    path = output / f"{collection}-bm25s.run"
    if not path.exists():
        run = search(Collection(COLLECTIONS[collection]), Collection(COLLECTIONS[collection]).queries,
                     FirstStageConfig(backend="bm25s", retrieval_depth=100))
        write_run({qid: docs for qid, docs in run.items() if docs}, path)
    return FirstStageConfig(backend="run", run=str(path), retrieval_depth=100)


def tokenization(args: argparse.Namespace) -> TokenizationConfig:
    """Rows of ``--max_length`` tokens, queries cut at 32 (at most half a row)."""
    return TokenizationConfig(max_length=args.max_length, max_query_length=min(32, args.max_length // 2))


def data_module(args: argparse.Namespace, output: Path, collection: str = "cranfield") -> RerankDataModule:
    return RerankDataModule(
        collection=COLLECTIONS[collection], first_stage=first_stage(collection, output.parent),
        folds=FoldsConfig(scheme="kfold", count=5, seed=0, test=1), model_name=args.model, output_dir=str(output),
        rerank_depth=100, list_size=args.list_size, strategy="random", batch_size=1,
        tokenization=tokenization(args), num_workers=args.num_workers)


def training_model(args: argparse.Namespace, checkpointing: bool = False, encoder_dropout: float | None = None,
                   freeze_embeddings: bool = False) -> CrossEncoderModel:
    """The cross-encoder as ``RerankModule`` trains it (speed-ups on), in training mode."""
    model = CrossEncoderModel.from_pretrained(args.model, gradient_checkpointing=checkpointing,
                                              encoder_dropout=encoder_dropout).train()
    speedups.enable(model.model)
    if freeze_embeddings:
        model.freeze_embeddings()
    return model


def training_data(args: argparse.Namespace, output: Path, collection: str = "cranfield") -> RerankDataModule:
    """The data module, prepared and set up for fitting (for the measurements that read its batches directly)."""
    data = data_module(args, output, collection)
    data.prepare_data()
    data.setup("fit")
    return data


def pairs_per_second(ends: list[float], pairs_per_step: int, warmup: int) -> float:
    return pairs_per_step * (len(ends) - 1 - warmup) / (ends[-1] - ends[warmup])


def bench_rerank(args: argparse.Namespace, output: Path, precision: str = "32-true") -> float:
    pl.seed_everything(0)
    clock = StepTimer()
    module = RerankModule(model_name=args.model, loss="listnet", forward_chunk_size=args.chunk or None,
                          speedups=args.speedups, tokenization=tokenization(args))
    trainer = pl.Trainer(accelerator="gpu" if args.device == "cuda" else "cpu", devices=1, precision=precision,
                         max_steps=args.steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[clock])
    trainer.fit(module, datamodule=data_module(args, output))
    return pairs_per_second(clock.times, args.list_size, args.warmup)


def training_batches(args: argparse.Namespace, output: Path, count: int) -> list[TrainingBatch]:
    """The first ``count`` batches of rerank's training data loader, tokenized."""
    return list(islice(iter(training_data(args, output).train_dataloader()), count))


def forward_backward(model: CrossEncoderModel, batch: TrainingBatch, chunk: int | None) -> None:
    """ListNet on one batch of lists, and its backward pass, as rerank's training step computes them."""
    scores = model.score(batch.inputs, chunk_size=chunk)
    build_loss("listnet")(scores.view_as(batch.mask), batch.labels, batch.mask).backward()


def bench_loop(args: argparse.Namespace, output: Path) -> float:
    batches = training_batches(args, output, args.steps)  # tokenized beforehand
    torch.manual_seed(0)
    model = training_model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    ends = []
    for batch in batches:
        forward_backward(model, batch, args.chunk)
        optimizer.step()
        optimizer.zero_grad()
        ends.append(time.perf_counter())
    return pairs_per_second(ends, args.list_size, args.warmup)


def bench_sentence_transformers(args: argparse.Namespace, output: Path) -> float:
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder as STCrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import ListNetLoss
    from transformers import TrainerCallback

    dataset = training_data(args, output).train_dataloader().dataset
    rows = [dataset[(0, 0, index % len(dataset))] for index in range(args.steps)]  # epoch 0, source 0
    train = Dataset.from_dict({"query": [row.query for row in rows], "docs": [row.documents for row in rows],
                               "labels": [[float(label) for label in row.labels] for row in rows]})
    folder = output / "st-model"
    CrossEncoderModel.from_pretrained(args.model).save_pretrained(str(folder))
    model = STCrossEncoder(str(folder), num_labels=1, max_length=args.max_length, device=args.device)
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *_: object, **__: object) -> None:
            ends.append(time.perf_counter())

    training = CrossEncoderTrainingArguments(
        output_dir=str(output / "st"), per_device_train_batch_size=1, max_steps=args.steps, learning_rate=2e-5,
        report_to="none", save_strategy="no", logging_strategy="no", dataloader_num_workers=args.num_workers,
        bf16=args.device == "cuda", use_cpu=args.device == "cpu",
        disable_tqdm=True, seed=0)
    trainer = CrossEncoderTrainer(model=model, args=training, train_dataset=train,
                                  loss=ListNetLoss(model, mini_batch_size=args.list_size), callbacks=[Clock()])
    trainer.train()
    return pairs_per_second(ends, args.list_size, args.warmup)


def padding_efficiency(args: argparse.Namespace, output: Path, collection: str, chunk: int | None) -> float:
    real = computed = 0
    for batch in islice(iter(training_data(args, output, collection).train_dataloader()), 100):
        mask = batch.inputs.attention_mask
        real += int(mask.sum())
        chunks = length_chunks(mask, chunk or mask.shape[0])
        computed += sum(len(rows) * width for rows, width in chunks)
    return real / computed


def throughput(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch)
        results = {"(a) rerank, Lightning Trainer": bench_rerank(args, output / "a"),
                   "(b) hand-written loop, pre-tokenized": bench_loop(args, output / "b"),
                   "(c) sentence-transformers CrossEncoderTrainer": bench_sentence_transformers(args, output / "c")}
    table = Table(title=f"ListNet, 1 query x {args.list_size} candidates per step, max length {args.max_length}, "
                        f"{args.steps} steps ({args.warmup} warm-up), {torch.get_num_threads()} threads")
    for column in ("system", "pairs/s", "vs (b)", "vs (c)"):
        table.add_column(column, justify="left" if column == "system" else "right")
    floor, reference = results["(b) hand-written loop, pre-tokenized"], results[
        "(c) sentence-transformers CrossEncoderTrainer"]
    for name, value in results.items():
        table.add_row(name, f"{value:.2f}", f"{value / floor:.2f}x", f"{value / reference:.2f}x")
    Console().print(table)
    with tempfile.TemporaryDirectory() as scratch:
        efficiency = {f"{collection}, {f'chunks of {chunk}' if chunk else 'whole batch'}":
                      padding_efficiency(args, Path(scratch) / collection, collection, chunk)
                      for collection in COLLECTIONS for chunk in (None, args.chunk)}
    print("padding efficiency (real / computed tokens):", {k: round(v, 3) for k, v in efficiency.items()})
    return {"pairs_per_second": results, "padding_efficiency": efficiency}


def profile(args: argparse.Namespace, output: Path) -> dict:
    """The operators that take a training step's CPU time (``torch.profiler``, ``--steps`` steps of the
    throughput batches after one warm-up step, forward + ListNet + backward)."""
    from torch.profiler import profile as profiler

    batches = training_batches(args, output, args.steps + 1)
    model = training_model(args)
    forward_backward(model, batches[0], args.chunk)
    with profiler() as recorded:
        for batch in batches[1:]:
            forward_backward(model, batch, args.chunk)
    events = recorded.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    print(events.table(sort_by="self_cpu_time_total", row_limit=12))
    return {event.key: event.self_cpu_time_total / total for event in events
            if event.self_cpu_time_total / total >= 0.01}


def one_step_memory(args: argparse.Namespace, size: int, checkpointing: bool) -> dict:
    """Peak RSS growth (MiB) and seconds of one training step with ``size`` candidates of max length."""
    torch.manual_seed(0)
    model = training_model(args, checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    ids = torch.randint(1000, 20000, (size, args.max_length))
    mask = torch.ones_like(ids)
    labels = torch.zeros(1, size)
    labels[0, 0] = 1
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    loss = build_loss("listnet")(model(ids, mask, chunk_size=args.chunk).view(1, size), labels)
    loss.backward()
    optimizer.step()
    seconds = time.perf_counter() - started
    return {"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - baseline, "seconds": seconds}


def memory(args: argparse.Namespace) -> dict:
    results = {}
    for checkpointing in (False, True):
        for size in args.sizes:
            command = [sys.executable, __file__, "_one", str(size), str(int(checkpointing)),
                       "--max_length", str(args.max_length), "--model", args.model, "--chunk", str(args.chunk or 0)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            key = f"N={size}, {'gradient checkpointing' if checkpointing else 'plain'}"
            results[key] = (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                            else {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]})
            print(key, results[key], flush=True)
    return results


SETTINGS = {"stock": {}, "encoder dropout 0": {"encoder_dropout": 0.0},
            "frozen embeddings": {"freeze_embeddings": True},
            "both": {"encoder_dropout": 0.0, "freeze_embeddings": True}}
"""The model settings that ``settings`` times (``RerankModule``'s ``encoder_dropout`` and ``freeze_embeddings``)."""


def settings(args: argparse.Namespace) -> dict:
    """Median seconds per training step of each setting at each length (see the module docstring)."""
    torch.manual_seed(0)
    models = {name: training_model(args, **options) for name, options in SETTINGS.items()}
    optimizers = {name: torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
                  for name, model in models.items()}
    loss = build_loss("listnet")
    results: dict[str, dict[str, float]] = {}
    for length in args.lengths:
        ids = torch.randint(1000, 20000, (args.list_size, length))
        mask, labels = torch.ones_like(ids), torch.zeros(1, args.list_size)
        labels[0, 0] = 1
        times: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(args.rounds + 1):  # the first round warms up
            for name, model in models.items():
                started = time.perf_counter()
                for _ in range(args.steps):
                    loss(model(ids, mask, chunk_size=args.chunk).view(1, -1), labels).backward()
                    optimizers[name].step()
                    optimizers[name].zero_grad()
                times[name].append((time.perf_counter() - started) / args.steps)
        results[str(length)] = {name: statistics.median(values[1:]) for name, values in times.items()}
    table = Table(title=f"s per training step, {args.list_size} rows, median of {args.rounds} rounds of "
                        f"{args.steps} steps")
    for column in ("tokens per row", *SETTINGS):
        table.add_column(column, justify="right")
    for length, row in results.items():
        table.add_row(length, *(f"{row[name]:.3f}" for name in SETTINGS))
    Console().print(table)
    return results


INSTRUCTION_SETS = {
    "this CPU": {},
    "AVX-512, no BF16/AMX": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512",
                             "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
"""The instruction sets of ``precision``: environment variables that cap PyTorch's CPU libraries."""


def precisions(args: argparse.Namespace) -> dict:
    results: dict[str, dict[str, float | str]] = {}
    for name, caps in INSTRUCTION_SETS.items():
        for precision in ("32-true", "bf16-mixed"):
            command = [sys.executable, __file__, "_precision", precision, "--model", args.model, "--steps",
                       str(args.steps), "--warmup", str(args.warmup), "--list_size", str(args.list_size),
                       "--max_length", str(args.max_length), "--chunk", str(args.chunk or 0)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                                  env={**os.environ, **caps})
            results.setdefault(name, {})[precision] = (float(done.stdout.strip().splitlines()[-1])
                                                       if done.returncode == 0 else
                                                       (done.stderr.strip().splitlines() or ["failed"])[-1])
            print(name, precision, results[name][precision], flush=True)
    table = Table(title=f"rerank training (a), 1 query x {args.list_size} candidates per step, max length "
                        f"{args.max_length}, {args.steps} steps ({args.warmup} warm-up), pairs/s")
    for column in ("instruction sets", "32-true", "bf16-mixed", "bf16 / fp32"):
        table.add_column(column, justify="left" if column == "instruction sets" else "right")
    for name, row in results.items():
        fp32, bf16 = row["32-true"], row["bf16-mixed"]  # pairs/s, or the error a run ended with
        ratio = f"{bf16 / fp32:.2f}x" if isinstance(fp32, float) and isinstance(bf16, float) else "-"
        table.add_row(name, *(f"{value:.2f}" if isinstance(value, float) else value for value in (fp32, bf16)), ratio)
    Console().print(table)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="*", default=["throughput"],
                        help="throughput | memory | profile | precision | settings")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--list_size", type=int, default=16)
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8, help="rerank's forward_chunk_size (0: off)")
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16, 64, 128])
    parser.add_argument("--lengths", type=int, nargs="+", default=[96, 128, 192], help="settings: tokens per row")
    parser.add_argument("--rounds", type=int, default=3, help="settings: rounds of --steps steps per variant")
    parser.add_argument("--device", default="cpu", help="where (a) and (c) train: cpu or cuda")
    parser.add_argument("--speedups", default="auto", help="(a)'s model.speedups")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    args.chunk = args.chunk or None
    if args.mode[0] == "_one":
        print(json.dumps(one_step_memory(args, int(args.mode[1]), bool(int(args.mode[2])))))
        return
    if args.mode[0] == "_precision":
        with tempfile.TemporaryDirectory() as scratch:
            print(bench_rerank(args, Path(scratch) / "a", precision=args.mode[1]))
        return
    if args.mode[0] == "profile":
        with tempfile.TemporaryDirectory() as scratch:
            result = profile(args, Path(scratch) / "profile")
    else:
        modes = {"memory": memory, "precision": precisions, "throughput": throughput, "settings": settings}
        result = modes[args.mode[0]](args)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        report = {"machine": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                  "args": {k: str(v) for k, v in vars(args).items()}, "results": result}
        args.output.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
