"""The GPU suite: everything a GPU user of rerank cares about, measured by one command in one 10-minute call.

    PYTHONUNBUFFERED=1 python scripts/benchmarks/bench_gpu.py --output docs/experiments/bench_gpu.json  # a GPU
    python scripts/benchmarks/bench_gpu.py --dry-run                           # every part, on CPU, tiny
    python scripts/benchmarks/bench_gpu.py --skip losses convergence           # some parts only

Parts (each skippable with ``--skip``; each prints its rows as it goes; the JSON and a markdown table at the end):

1. ``train``: training throughput and model FLOPs utilisation of a BERT-base-sized encoder (12 layers, 768 wide,
   random weights from a config: nothing to download) and a MiniLM-sized one (6 x 384), a one-label head, ListNet
   on lists of 16 candidates of 512 tokens, AdamW, SDPA attention; fp32, ``bf16-mixed``, ``16-mixed`` (with its
   gradient scaler), and ``bf16-mixed`` under ``torch.compile``. MFU = achieved model FLOPs / the GPU's dense
   bf16 peak, with the training FLOPs of a sequence of S tokens counted as ``6 N S + 12 L d S^2`` (N: the
   non-embedding parameters, L layers of width d; the second term is attention's scores and weighted sums, 2
   matrix products of S x S x d a layer, times 3 for forward and backward), as in Kaplan et al. (2020) and
   Chowdhery et al. (PaLM, 2022, appendix B).
2. ``overhead``: the same training step through ``RerankModule`` and ``lightning.Trainer`` (the real path, data
   pre-tokenized as the loop's) against a hand-written loop: their ratio.
3. ``inference``: ``rerank.Reranker`` in bf16 against ``sentence_transformers.CrossEncoder.predict`` on the same
   pairs and model (BERT-base-sized), ONNX Runtime's CUDA provider when it is there, and the real / computed token
   ratio of ``rerank predict``'s length-sorted batches.
4. ``losses``: every loss head at N = 100 and 1000 on CUDA beside allRank's (``scripts/benchmarks/bench_losses.py``).
5. ``convergence``: MiniLM (``--model``) on Cranfield (bm25s candidates) for ``--steps`` steps in ``16-mixed``
   and in fp32: the loss falls and stays finite, and the validation metrics agree within noise.
6. ``memory``: peak GPU memory of one training step against list size (16, 64, 256 candidates x 512 tokens),
   with and without gradient checkpointing.
7. ``levers``: first the unpadded path's scores and gradients on the device against the padded model's (float32
   the reference, bf16-mixed's own difference the tolerance); then each speed-up of ``model.speedups`` alone and
   all together (``unpadded``: variable-length attention on rows without padding; ``compiled``: the position-wise
   blocks under ``torch.compile``; ``fused_adamw``; ``bf16_weights``: bfloat16 weights kept between steps, float32
   masters in the optimizer), and the longer lists that the memory they free allows, on BERT-base in
   ``bf16-mixed``: sequences/s and MFU (useful FLOPs: the real tokens only) at 512 tokens and at MS MARCO's lengths
   (passages of 30 to 200 tokens, padded to a batch's longest), against today's padded step. Goals: >= 40 % MFU at
   512 tokens, >= 2x today's sequences/s at MS MARCO's.
8. ``trainer``: rerank's training (``RerankModule`` through ``lightning.Trainer``, real Cranfield lists, data
   loading and tokenization included) against sentence-transformers' ``CrossEncoderTrainer`` with the same model,
   list and batch size (``scripts/benchmarks/bench_train.py``'s protocol, on the GPU, bf16), today's settings and with
   the levers. Goal: >= 1.5x.
9. ``scale``: the pending GPU row of docs/experiments/scale.md: a Robust04-shaped collection (``--scale`` of its
   documents, all 250 topics and their judgments in proportion: the same training lists, validation and test as
   the whole collection), BERT-base's shape with random weights, ``robust04.yaml``'s fold 1 for ``--scale-epochs``
   epochs: the time and peak GPU memory of each phase (first stage and lists, each training
   epoch, each validation, the test), from which the 5-fold protocol's cost follows.

``--dry-run`` runs every part on the CPU with a tiny random BERT, tiny lists and a few steps (``torch.compile``
with the ``aot_eager`` backend: traced and differentiated as on a GPU, no code generated), in seconds; a test
calls it, so the suite cannot rot between GPU loans. On a GPU, a part that fails is recorded with its error and
the others still run.

A lent GPU machine reaches nothing outside, and its image lacks some packages rerank imports and the MiniLM
weights: ``bash scripts/benchmarks/gpu_prepare.sh`` (here, once) puts them in ``.gpu/`` (wheels for Python 3.12, MiniLM
in half precision, the Cranfield files of the ir_datasets cache), under the 64 MiB a call may carry; then, there::

    python3 -m pip install -q --no-index --no-deps --target .gpu/site .gpu/wheels/*.whl
    PYTHONPATH=.gpu/site:. PYTHONUNBUFFERED=1 IR_DATASETS_HOME=.gpu/irds_home \\
        python3 scripts/benchmarks/bench_gpu.py --model .gpu/minilm --skip scale --output $OUT/bench_gpu.json \\
        --markdown $OUT/bench_gpu.md                                                    # about 8 minutes
    ... python3 scripts/benchmarks/bench_gpu.py --skip train overhead inference losses convergence memory \\
        levers trainer \\
        --output $OUT/bench_scale.json --markdown $OUT/bench_scale.md                   # part 9: 3 to 5 minutes

The wheels (``scripts/benchmarks/gpu_prepare.sh`` fetches them with ``pip download --only-binary=:all: --python-version
3.12 --platform manylinux...``): jsonargparse[signatures] (docstring-parser, typeshed-client), pytrec-eval-terrier,
ir_datasets with lz4 (all that reading Cranfield's prepared cache imports), bm25s, PyStemmer, allRank (its losses
only), and datasets with dill and multiprocess (not needed by the suite: for ``rerank`` runs on local files there).
The H100 image of 2026-11 had the rest (torch 2.11, transformers 5.17, lightning 2.6.6,
sentence-transformers 6.0.1, onnxruntime without its CUDA provider); the whole suite ran there in about 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig

from rerank import build_loss, enable_activation_checkpointing

REPO = Path(__file__).resolve().parents[2]

PARTS = ("train", "overhead", "inference", "losses", "convergence", "memory", "levers", "trainer", "scale")
LEVERS = ("unpadded", "compiled", "fused_adamw", "bf16_weights")
"""The speed-ups of ``model.speedups`` that part 7 measures (rerank.model.speedups)."""
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100 PCIe": 756.5, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0,
                    "A10": 125.0}
"""Dense bf16 tensor-core peaks (NVIDIA's data sheets, without sparsity), matched against the device name."""


@dataclass(frozen=True)
class Size:
    """An encoder shape: layers, width, heads, feed-forward width."""

    name: str
    layers: int
    width: int
    heads: int
    intermediate: int

    def config(self, vocabulary: int = 30522, dropout: float = 0.1) -> BertConfig:
        return BertConfig(vocab_size=vocabulary, hidden_size=self.width, num_hidden_layers=self.layers,
                          num_attention_heads=self.heads, intermediate_size=self.intermediate, num_labels=1,
                          max_position_embeddings=512, hidden_dropout_prob=dropout,
                          attention_probs_dropout_prob=dropout)


SIZES = {"bert-base": Size("bert-base", 12, 768, 12, 3072), "minilm": Size("minilm", 6, 384, 12, 1536)}
TINY = Size("tiny", 2, 32, 2, 37)


@dataclass
class Settings:
    """What the parts run at (full, or ``--dry-run``)."""

    device: str
    sizes: list[Size]
    list_size: int
    lists_per_step: int
    tokens: int
    steps: int
    warmup: int
    memory_lists: list[int]
    loss_sizes: list[int]
    pairs: int
    convergence_steps: int
    marco_lengths: tuple[int, int] = (30, 200)
    lever_lists: tuple[int, ...] = (32, 64)
    scale: float = 0.2
    scale_epochs: int = 2
    compile_backend: str = "inductor"


def settings(args: argparse.Namespace) -> Settings:
    if args.dry_run:
        return Settings(device="cpu", sizes=[TINY], list_size=4, lists_per_step=2, tokens=32, steps=2, warmup=1,
                        memory_lists=[4, 8], loss_sizes=[10], pairs=64, convergence_steps=3, marco_lengths=(4, 24),
                        lever_lists=(8,), scale=0.001, scale_epochs=1,
                        compile_backend="aot_eager")  # traced and differentiated as on a GPU; no code generated
    return Settings(device="cuda", sizes=[SIZES["bert-base"], SIZES["minilm"]], list_size=16, lists_per_step=4,
                    tokens=512, steps=10, warmup=3, memory_lists=[16, 64, 256], loss_sizes=[100, 1000],
                    pairs=4096, convergence_steps=args.steps, scale=args.scale, scale_epochs=args.scale_epochs)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_tflops(override: float | None) -> float | None:
    """The GPU's dense bf16 peak in TFLOP/s (None on CPU or an unknown GPU without ``--peak-tflops``)."""
    if override is not None or not torch.cuda.is_available():
        return override
    name = torch.cuda.get_device_name()
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)


def training_flops(size: Size, parameters: int, tokens: int) -> float:
    """Training FLOPs of one sequence (see the module docstring): ``6 N S + 12 L d S^2``."""
    return 6 * parameters * tokens + 12 * size.layers * size.width * tokens**2


def random_model(size: Size, device: str, checkpointing: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(size.config(), attn_implementation="sdpa").to(device)
    if checkpointing:
        enable_activation_checkpointing(model)
    return model.train()


def non_embedding_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if "embeddings" not in name)


def lists(settings: Settings, lists_per_step: int, list_size: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Token ids, attention mask and labels of ``lists_per_step`` lists of ``list_size`` full-length rows."""
    generator = torch.Generator().manual_seed(seed)
    rows = lists_per_step * list_size
    ids = torch.randint(1000, 20000, (rows, settings.tokens), generator=generator)
    labels = torch.randint(0, 3, (lists_per_step, list_size), generator=generator)
    labels[:, 0] = 2
    ids = ids.to(settings.device)
    return ids, torch.ones_like(ids), labels.to(settings.device)


PRECISIONS: dict[str, torch.dtype | None] = {"32-true": None, "bf16-mixed": torch.bfloat16,
                                             "16-mixed": torch.float16}


def step_function(model: torch.nn.Module, precision: str, device: str) -> Callable[[tuple[torch.Tensor, ...]], float]:
    """One training step (forward, ListNet, backward, AdamW) at ``precision``; returns the loss."""
    dtype = PRECISIONS[precision]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    scaler = torch.amp.GradScaler(device, enabled=precision == "16-mixed")
    loss_head = build_loss("listnet")

    def step(batch: tuple[torch.Tensor, ...]) -> float:
        ids, mask, labels = batch
        autocast = torch.autocast(device, dtype=dtype) if dtype is not None else nullcontext()
        with autocast:
            scores = model(input_ids=ids, attention_mask=mask).logits.view(labels.shape)
        loss = loss_head(scores, labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def timed(function: Callable[[], Any], steps: int, warmup: int, device: str) -> float:
    """Seconds per call, after ``warmup`` calls."""
    for _ in range(warmup):
        function()
    synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        function()
    synchronize(device)
    return (time.perf_counter() - started) / steps


def part_train(run: Settings, report: Callable[[dict], None], peak: float | None, compile_: bool) -> None:
    variants = [(precision, False) for precision in PRECISIONS] + ([("bf16-mixed", True)] if compile_ else [])
    batch = lists(run, run.lists_per_step, run.list_size)
    for size in run.sizes:
        for precision, compiled in variants:
            sequences, parameters = _training_throughput(run, size, precision, compiled, batch)
            achieved = training_flops(size, parameters, run.tokens) * sequences / 1e12
            report({"part": "train", "model": size.name, "precision": precision, "compile": compiled,
                    "sequences_per_s": sequences, "tflops": achieved,
                    "mfu": achieved / peak if peak else None})


def _training_throughput(run: Settings, size: Size, precision: str, compiled: bool,
                         batch: tuple[torch.Tensor, ...]) -> tuple[float, int]:
    """Sequences per second of training steps, and the model's non-embedding parameters (its memory is freed on
    return)."""
    model = random_model(size, run.device)
    parameters = non_embedding_parameters(model)
    step = step_function(torch.compile(model, backend=run.compile_backend) if compiled else model, precision,
                         run.device)
    seconds = timed(lambda: step(batch), run.steps, run.warmup + 2 * compiled, run.device)
    return run.lists_per_step * run.list_size / seconds, parameters


def _module_and_batches(folder: Path, run: Settings, size: Size) -> tuple[Any, list]:
    """A RerankModule of a random model saved in ``folder`` and pre-tokenized training batches of it."""
    from rerank import OptimizerSettings, PairInputs, RerankModule, TokenizationConfig, TrainingBatch

    tokenization = TokenizationConfig(max_length=run.tokens, max_query_length=8)
    module = RerankModule(model_name=str(_saved(folder, size)), loss="listnet", tokenization=tokenization,
                          optimizer=OptimizerSettings(warmup=0), forward_chunk_size=None)
    batches = []
    for seed in range(run.steps + run.warmup):
        ids, mask, labels = lists(run, run.lists_per_step, run.list_size, seed)
        shape = labels.shape
        batches.append(TrainingBatch(inputs=PairInputs(ids.cpu(), mask.cpu()), labels=labels.cpu(),
                                     mask=torch.ones(shape, dtype=torch.bool),
                                     slots=torch.arange(shape.numel())))
    return module, batches


def _saved(folder: Path, size: Size) -> Path:
    """A random model of ``size`` saved as a Hugging Face folder with a small WordPiece vocabulary."""
    target = folder / size.name
    if not target.exists():
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(30522 - 5))]
        target.mkdir(parents=True)
        (target / "vocab.txt").write_text("\n".join(words) + "\n")
        torch.manual_seed(0)
        AutoModelForSequenceClassification.from_config(size.config()).save_pretrained(target)
        (target / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                                  "do_lower_case": True}))
        AutoTokenizer.from_pretrained(target).save_pretrained(target)  # transformers 4 and 5 alike
    return target


def part_overhead(run: Settings, report: Callable[[dict], None], folder: Path) -> None:
    import lightning.pytorch as pl

    class Clock(pl.Callback):
        """The time at the end of the warm-up steps and at the end of the last step, the device synchronized at
        these two points only (as the loop is timed): a synchronization at every step would leave the device
        idle while the host runs Lightning's code between steps, which the loop's timing does not see either."""

        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_train_batch_end(self, _trainer: pl.Trainer, _module: object, _outputs: object, _batch: object,
                               batch_idx: int) -> None:
            if batch_idx in (run.warmup - 1, len(batches) - 1):
                synchronize(run.device)
                self.ends.append(time.perf_counter())

    size = run.sizes[-1]
    precision = "bf16-mixed"
    module, batches = _module_and_batches(folder, run, size)
    clock = Clock()
    trainer = pl.Trainer(accelerator="gpu" if run.device == "cuda" else "cpu", devices=1, precision=precision,
                         max_steps=len(batches), logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[clock])
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None,
                                                                      pin_memory=run.device == "cuda"))
    lightning_seconds = (clock.ends[-1] - clock.ends[0]) / (len(batches) - run.warmup)
    module, batches = _module_and_batches(folder, run, size)
    model = module.model.to(run.device).train()
    step = step_function(model.model, precision, run.device)
    on_device = [tuple(t.to(run.device) for t in (b.inputs.input_ids, b.inputs.attention_mask, b.labels))
                 for b in batches]
    for batch in on_device[: run.warmup]:
        step(batch)
    loop_seconds = timed(lambda: [step(batch) for batch in on_device[run.warmup:]], 1, 0, run.device)
    loop_seconds /= len(on_device) - run.warmup
    report({"part": "overhead", "model": size.name, "precision": precision,
            "lightning_sequences_per_s": run.lists_per_step * run.list_size / lightning_seconds,
            "loop_sequences_per_s": run.lists_per_step * run.list_size / loop_seconds,
            "ratio": loop_seconds / lightning_seconds})


def _pairs(run: Settings) -> tuple[list[str], list[str]]:
    generator = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(1000, 3000)]

    def text(length: int) -> str:
        return " ".join(words[i] for i in torch.randint(0, len(words), (length,), generator=generator).tolist())

    lengths = torch.randint(run.tokens // 8, run.tokens, (run.pairs,), generator=generator).tolist()
    return [text(6) for _ in lengths], [text(length) for length in lengths]


def part_inference(run: Settings, report: Callable[[dict], None], folder: Path) -> None:
    from sentence_transformers import CrossEncoder

    from rerank import Reranker

    size = run.sizes[0]
    model = _saved(folder, size)
    queries, documents = _pairs(run)
    precision = "bf16-true" if run.device == "cuda" else "32"  # weights in bf16 on both sides
    reranker = Reranker.from_pretrained(str(model), batch_size=64, device=run.device, precision=precision,
                                        max_length=run.tokens, max_query_length=16)
    unpadded = Reranker.from_pretrained(str(model), batch_size=64, device=run.device, precision=precision,
                                        max_length=run.tokens, max_query_length=16,
                                        exact=("cls_only_last_layer", "unpadded"))
    st = CrossEncoder(str(model), max_length=run.tokens, device=run.device,
                      model_kwargs={"dtype": torch.bfloat16} if run.device == "cuda" else {})
    pairs = list(zip(queries, documents))
    systems = {"rerank Reranker": lambda: reranker.score_pairs(queries, documents),
               "rerank Reranker, unpadded": lambda: unpadded.score_pairs(queries, documents),
               "sentence-transformers CrossEncoder.predict": lambda: st.predict(pairs, batch_size=64)}
    rows = {name: len(pairs) / timed(function, 2, 1, run.device) for name, function in systems.items()}
    onnx = _onnx_cuda(model, reranker, queries, documents, run)
    if onnx is not None:
        rows["onnxruntime CUDA"] = onnx
    baseline = rows["sentence-transformers CrossEncoder.predict"]
    for name, pairs_per_s in rows.items():
        report({"part": "inference", "system": name, "model": size.name, "precision": precision,
                "pairs_per_s": pairs_per_s, "vs_sentence_transformers": pairs_per_s / baseline})
    report({"part": "inference", "system": "rerank predict batches", "padding_efficiency":
            _padding_efficiency(reranker, queries, documents)})


def _padding_efficiency(reranker: Any, queries: list[str], documents: list[str], batch: int = 64) -> float:
    """Real / computed tokens of ``rerank predict``'s batches: pairs sorted by document length, then cut."""
    from types import SimpleNamespace

    from rerank import CandidateLists, EvaluationBatches

    texts = {str(i): document for i, document in enumerate(documents)}
    lists = CandidateLists.from_run({str(i): {str(i): 0.0} for i in range(len(queries))},
                                    {str(i): query for i, query in enumerate(queries)})
    dataset = EvaluationBatches(lists, SimpleNamespace(text=texts.__getitem__), batch,
                                length=lambda doc: len(texts[doc]))
    real = computed = 0
    for index in range(len(dataset)):
        pairs = dataset[index]
        inputs = reranker.tokenize([query for _, query, *_ in pairs], [text for *_, text in pairs])
        real += int(inputs.attention_mask.sum())
        computed += inputs.attention_mask.numel()
    return real / computed


def _onnx_cuda(model: Path, reranker: Any, queries: list[str], documents: list[str], run: Settings) -> float | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        print("inference: ONNX Runtime has no CUDA provider here (onnxruntime-gpu is not installed)", flush=True)
        return None
    from rerank import ONNX_OUTPUT, export_onnx

    path = model.parent / "model.onnx"
    export_onnx(reranker.model.cpu(), path)
    reranker.model.to(run.device)
    session = onnxruntime.InferenceSession(str(path), providers=["CUDAExecutionProvider"])

    def score() -> None:
        for start in range(0, len(queries), 64):
            inputs = reranker.tokenize(queries[start: start + 64], documents[start: start + 64])
            feed = {"input_ids": inputs.input_ids.numpy(), "attention_mask": inputs.attention_mask.numpy()}
            if inputs.token_type_ids is not None:
                feed["token_type_ids"] = inputs.token_type_ids.numpy()
            session.run([ONNX_OUTPUT], feed)

    return len(queries) / timed(score, 2, 1, run.device)


def part_losses(run: Settings, report: Callable[[dict], None], folder: Path) -> None:
    output = folder / "losses.json"
    command = [sys.executable, str(REPO / "scripts" / "benchmarks" / "bench_losses.py"), "--device", run.device,
               "--sizes", *map(str, run.loss_sizes), "--min-seconds", "0.5", "--repeats", "3", "--output", str(output)]
    if run.device == "cpu":
        command += ["--losses", "listnet", "lambdarank", "--queries", "4", "--in-process"]
    subprocess.run(command, check=True, cwd=REPO)
    for row in json.loads(output.read_text()):
        report({"part": "losses", **row})


def part_convergence(run: Settings, report: Callable[[dict], None], folder: Path, model: str | None) -> None:
    """rerank fit on Cranfield (test fold 1, bm25s candidates), in 16-mixed and in fp32, from the same start."""
    from rerank import run_command

    if run.device == "cpu":
        model = str(_tiny_cranfield_model(folder))
    settings = ["--config", "cranfield.yaml", "--model.model_name", model or "sentence-transformers/all-MiniLM-L6-v2",
                "--pretrain", "null", "--data.train", '[{"queries": "train", "targets": "qrels"}]',
                "--data.first_stage.backend", "bm25s", "--data.first_stage.index_dir", str(folder / "indexes"),
                "--trainer.max_steps", str(run.convergence_steps), "--trainer.max_epochs", "-1",
                "--trainer.val_check_interval", str(run.convergence_steps), "--trainer.check_val_every_n_epoch", "null",
                "--trainer.enable_progress_bar", "false", "--trainer.log_every_n_steps", "1",
                "--last_checkpoint.every_n_train_steps", "100000"]
    if run.device == "cpu":
        settings += ["--model.tokenization.max_length", "32", "--model.tokenization.max_query_length", "8",
                     "--data.rerank_depth", "5",
                     "--data.first_stage.retrieval_depth", "5", "--evaluation.selection.interpolate", "false"]
    for precision in ("16-mixed", "32-true"):
        output = folder / f"convergence-{precision}"
        logger = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(output)}}
        metrics = run_command("fit", [*settings, "--trainer.precision", precision, "--output_dir", str(output),
                            "--trainer.logger", json.dumps(logger),
                            "--trainer.accelerator", "gpu" if run.device == "cuda" else "cpu"])
        losses = _logged_losses(output)
        window = max(1, len(losses) // 5)
        report({"part": "convergence", "precision": precision, "steps": run.convergence_steps,
                "first_losses": sum(losses[:window]) / window, "last_losses": sum(losses[-window:]) / window,
                "finite": all(abs(value) < float("inf") for value in losses),
                **{f"test_{name}": value for name, value in metrics["reranker"].items()}})


def _tiny_cranfield_model(folder: Path) -> Path:
    """A tiny random BERT with MiniLM's WordPiece vocabulary (from the Hugging Face cache) for the dry run."""
    target = folder / "tiny-cranfield"
    if not target.exists():
        tokenizer = AutoTokenizer.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
        torch.manual_seed(0)
        AutoModelForSequenceClassification.from_config(TINY.config(vocabulary=tokenizer.vocab_size)).save_pretrained(
            target)
        tokenizer.save_pretrained(target)
    return target


def _logged_losses(output: Path) -> list[float]:
    """The per-step training losses Lightning's CSV logger wrote."""
    import csv

    values = []
    for path in sorted(output.glob("lightning_logs/version_*/metrics.csv")):
        with path.open() as handle:
            values += [float(row["train/loss"]) for row in csv.DictReader(handle) if row.get("train/loss")]
    return values


def part_memory(run: Settings, report: Callable[[dict], None]) -> None:
    size = run.sizes[0]
    for checkpointing in (False, True):
        for list_size in run.memory_lists:
            try:
                row = _one_step_memory(run, size, list_size, checkpointing)
            except torch.cuda.OutOfMemoryError:
                row = {"error": "out of memory"}
            if run.device == "cuda":
                torch.cuda.empty_cache()
            report({"part": "memory", "model": size.name, "candidates": list_size, "tokens": run.tokens,
                    "gradient_checkpointing": checkpointing, **row})


def _one_step_memory(run: Settings, size: Size, list_size: int, checkpointing: bool) -> dict[str, Any]:
    """Peak GPU memory (GiB, everything allocated, the model's weights and Adam's state included) and seconds of
    one bf16-mixed training step on one list of ``list_size`` full-length rows."""
    if run.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = random_model(size, run.device, checkpointing)
    step = step_function(model, "bf16-mixed", run.device)
    batch = lists(run, 1, list_size)
    seconds = timed(lambda: step(batch), 1, 0, run.device)
    return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30 if run.device == "cuda" else None,
            "step_s": seconds}


def marco_lists(run: Settings, lists_per_step: int, list_size: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """As :func:`lists`, with rows of MS MARCO's lengths (uniform in ``run.marco_lengths``), right-padded to the
    longest of the batch."""
    generator = torch.Generator().manual_seed(seed)
    rows = lists_per_step * list_size
    lengths = torch.randint(run.marco_lengths[0], run.marco_lengths[1] + 1, (rows,), generator=generator)
    mask = (torch.arange(int(lengths.max())) < lengths[:, None]).long()
    ids = torch.randint(1000, 20000, mask.shape, generator=generator) * mask
    labels = torch.randint(0, 3, (lists_per_step, list_size), generator=generator)
    labels[:, 0] = 2
    return ids.to(run.device), mask.to(run.device), labels.to(run.device)


def lever_step(model: torch.nn.Module, levers: tuple[str, ...], device: str) -> Callable[[tuple[torch.Tensor, ...]],
                                                                                          Any]:
    """One bf16-mixed training step (forward, ListNet, backward, AdamW) with ``levers`` applied to the model and its
    optimizer as ``model.speedups`` applies them."""
    from rerank import adamw, speedups

    speedups.enable(model, levers)
    if "bf16_weights" in levers:
        model.to(torch.bfloat16)
    optimizer = adamw([{"params": list(model.parameters()), "lr": 1e-5}], levers)
    loss_head = build_loss("listnet")

    def step(batch: tuple[torch.Tensor, ...]) -> Any:
        ids, mask, labels = batch
        with torch.autocast(device, dtype=torch.bfloat16):
            scores = model(input_ids=ids, attention_mask=mask).logits.view(labels.shape)
        loss = loss_head(scores.float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def unpadded_agreement(run: Settings, size: Size) -> dict[str, Any]:
    """The unpadded path's scores and gradients on this device against the padded model's in float32 (the
    reference), beside the padded model's own in bf16-mixed (the tolerance bf16 itself costs): one ListNet step on
    lists of MS MARCO's lengths, the same random weights."""
    from rerank import speedups

    ids, mask, labels = marco_lists(run, 2, run.list_size, seed=1)
    outcomes = {}
    for name, levers, dtype in (("fp32", (), None), ("bf16", (), torch.bfloat16),
                                ("unpadded", ("unpadded",), torch.bfloat16)):
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_config(
            size.config(dropout=0.0), attn_implementation="sdpa").to(run.device).train()
        speedups.enable(model, levers)
        with torch.autocast(run.device, dtype=dtype) if dtype is not None else nullcontext():
            scores = model(input_ids=ids, attention_mask=mask).logits.float().view(labels.shape)
        build_loss("listnet")(scores, labels).backward()
        gradient = torch.cat([torch.zeros_like(p).flatten() if p.grad is None else p.grad.float().flatten()
                              for p in model.parameters()])
        outcomes[name] = scores.detach(), gradient
        del model
    reference_scores, reference_gradient = outcomes["fp32"]
    row: dict[str, Any] = {"part": "levers", "check": "scores and gradients against the padded model in fp32"}
    for name in ("bf16", "unpadded"):
        scores, gradient = outcomes[name]
        row[f"{name}_max_score_difference"] = float((scores - reference_scores).abs().max())
        row[f"{name}_gradient_relative_difference"] = float((gradient - reference_gradient).norm()
                                                            / reference_gradient.norm())
    return row


def part_levers(run: Settings, report: Callable[[dict], None], peak: float | None) -> None:
    """Part 7 (module docstring): the unpadded path checked against the padded one on this device, then each lever
    alone and all together, at 512 tokens and at MS MARCO's lengths."""
    from rerank import speedups

    speedups.COMPILE_BACKEND = run.compile_backend
    size = run.sizes[0]
    report(unpadded_agreement(run, size))
    variants = [(), *((lever,) for lever in LEVERS), LEVERS]
    for workload, make in (("512 tokens", lists), ("MS MARCO lengths", marco_lists)):
        for list_size in (run.list_size, *run.lever_lists) if workload == "MS MARCO lengths" else (run.list_size,):
            batch = make(run, run.lists_per_step, list_size)
            real_tokens = batch[1].sum(dim=1).tolist()
            for levers in variants if list_size == run.list_size else [LEVERS]:
                torch.manual_seed(0)
                model = AutoModelForSequenceClassification.from_config(
                    size.config(dropout=0.0), attn_implementation="sdpa").to(run.device).train()
                parameters = non_embedding_parameters(model)
                step = lever_step(model, levers, run.device)
                seconds = timed(lambda step=step, batch=batch: step(batch), run.steps,
                                run.warmup + 2 * ("compiled" in levers), run.device)
                useful = sum(training_flops(size, parameters, int(tokens)) for tokens in real_tokens) / seconds / 1e12
                report({"part": "levers", "model": size.name, "workload": workload, "candidates": list_size,
                        "levers": "+".join(levers) or "none (today's padded step)",
                        "sequences_per_s": len(real_tokens) / seconds, "tflops": useful,
                        "mfu": useful / peak if peak else None})
                del model, step
                if run.device == "cuda":
                    torch.cuda.empty_cache()


def part_trainer(run: Settings, report: Callable[[dict], None], folder: Path) -> None:
    """Part 8 (module docstring): scripts/benchmarks/bench_train.py's (a) and (c) on this device, today's and with the
    levers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_train", REPO / "scripts" / "benchmarks" / "bench_train.py")
    bench_train = importlib.util.module_from_spec(spec)
    sys.modules["bench_train"] = bench_train
    spec.loader.exec_module(bench_train)
    model = str(_tiny_cranfield_model(folder) if run.device == "cpu" else _saved(folder, run.sizes[-1]))
    args = argparse.Namespace(model=model, list_size=run.list_size, max_length=min(run.tokens, 256),
                              steps=run.steps + run.warmup, warmup=run.warmup, chunk=0, num_workers=0,
                              device=run.device, speedups="auto")
    reference = bench_train.bench_sentence_transformers(args, folder / "trainer-st")
    for speedups_ in ("auto", ["cls_only_last_layer", *LEVERS]):
        args.speedups = speedups_
        ours = bench_train.bench_rerank(args, folder / f"trainer-{len(speedups_)}", precision="bf16-mixed")
        report({"part": "trainer", "model": Path(model).name, "list": run.list_size, "tokens": args.max_length,
                "rerank_speedups": speedups_ if isinstance(speedups_, str) else "+".join(speedups_),
                "rerank_pairs_per_s": ours, "sentence_transformers_pairs_per_s": reference, "ratio": ours / reference})


def part_scale(run: Settings, report: Callable[[dict], None], folder: Path) -> None:
    """Part 9 (module docstring): Robust04's fold 1, phase by phase."""
    import importlib.util

    from rerank import from_config

    spec = importlib.util.spec_from_file_location("make_collection", REPO / "scripts" / "data" / "make_collection.py")
    make_collection = importlib.util.module_from_spec(spec)
    sys.modules["make_collection"] = make_collection
    spec.loader.exec_module(make_collection)
    started = time.perf_counter()
    shape = make_collection.ROBUST04.scaled(run.scale)
    make_collection.make(shape, folder / "robust04-shaped", seed=42)
    report({"part": "scale", "phase": "the collection generated", "documents": shape.documents,
            "seconds": time.perf_counter() - started})
    phases = _phases(run.device, report)
    cli = from_config(_scale_arguments(run, folder))
    cli.trainer.callbacks.append(phases)
    phases._begin()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, weights_only=True)
    cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False, weights_only=True)


def _scale_arguments(run: Settings, folder: Path) -> list[str]:
    """``rerank fit``'s options for the Robust04-shaped fold (on a CPU, a dry run's tiny sizes)."""
    arguments = ["--config", "robust04.yaml", "--config", str(folder / "robust04-shaped" / "collection.yaml"),
                 "--model.model_name", str(_saved(folder, run.sizes[0])), "--data.first_stage.backend", "bm25s",
                 "--data.first_stage.index_dir", str(folder / "scale-indexes"), "--trainer.max_epochs",
                 str(run.scale_epochs), "--trainer.precision", "bf16-mixed", "--trainer.enable_progress_bar", "false",
                 "--trainer.logger", "false", "--output_dir", str(folder / "scale-fit"),
                 "--trainer.accelerator", "gpu" if run.device == "cuda" else "cpu", "--data.num_workers", "0"]
    if run.device == "cpu":
        arguments += ["--model.tokenization", json.dumps({"max_length": 64, "max_query_length": 8, "passages": "maxp",
                                                          "stride": 16, "max_passages": 2}),
                      "--data.rerank_depth", "10", "--data.first_stage.retrieval_depth", "20",
                      "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2",
                      "--trainer.limit_test_batches", "2", "--trainer.accumulate_grad_batches", "1"]
    return arguments


def _phases(device: str, report: Callable[[dict], None]) -> Any:
    """A Lightning callback that reports each phase's seconds and peak GPU memory as it ends. Lightning validates
    inside the training epoch (after its last batch, before ``on_train_epoch_end``), so a training epoch ends where
    its validation begins."""
    import lightning.pytorch as pl

    class Phases(pl.Callback):
        def __init__(self) -> None:
            self.started = time.perf_counter()
            self.training = False

        def _begin(self) -> None:
            synchronize(device)
            self.started = time.perf_counter()
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()

        def _end(self, phase: str, **extra: Any) -> None:
            synchronize(device)
            report({"part": "scale", "phase": phase, "seconds": time.perf_counter() - self.started,
                    "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None, **extra})

        def _end_training(self, trainer: pl.Trainer) -> None:
            if self.training:
                self.training = False
                self._end(f"training epoch {trainer.current_epoch + 1}",
                          batches=trainer.fit_loop.epoch_loop.batch_progress.current.completed)

        def on_fit_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            self._end("first stage, training lists, model on the device")

        def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            self._begin()
            self.training = True

        def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            self._end_training(trainer)

        def on_validation_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            self._end_training(trainer)
            self._begin()

        def on_validation_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            self._end(f"validation after epoch {trainer.current_epoch + 1}")

        def on_test_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            self._begin()

        def on_test_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            self._end("test")

    return Phases()


def markdown(rows: list[dict]) -> str:
    """One table per part."""
    lines = []
    for part in PARTS:
        selected = [row for row in rows if row["part"] == part]
        if not selected:
            continue
        columns = [key for key in selected[0] if key != "part"]
        for row in selected[1:]:
            columns += [key for key in row if key not in columns and key != "part"]
        lines += [f"### {part}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(column)) for column in columns) + " |" for row in selected]
        lines.append("")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def environment() -> dict[str, Any]:
    import lightning
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "lightning": lightning.__version__, "machine": platform.processor() or platform.machine()}
    if torch.cuda.is_available():
        info |= {"gpu": torch.cuda.get_device_name(), "cuda": torch.version.cuda,
                 "driver": _driver()}
    return info


def _driver() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="every part on CPU, tiny sizes, in seconds")
    parser.add_argument("--skip", nargs="*", default=[], choices=PARTS, help="parts not to run")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out of part 1")
    parser.add_argument("--model", help="MiniLM (a folder or hub id) for the convergence part")
    parser.add_argument("--steps", type=int, default=300, help="training steps of the convergence part")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, if its name is not known")
    parser.add_argument("--scale", type=float, default=0.2, help="part 9: the share of Robust04's documents")
    parser.add_argument("--scale-epochs", type=int, default=2, help="part 9: training epochs (each validated)")
    parser.add_argument("--output", type=Path, help="write the rows and the environment as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no GPU here: use --dry-run to check the suite on the CPU")
    run = settings(args)
    peak = peak_tflops(args.peak_tflops)
    rows: list[dict] = []

    def report(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    print(json.dumps({"environment": environment(), "peak_bf16_tflops": peak}), flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        parts: dict[str, Callable[[], None]] = {
            "train": lambda: part_train(run, report, peak, not args.no_compile),
            "overhead": lambda: part_overhead(run, report, folder),
            "inference": lambda: part_inference(run, report, folder),
            "losses": lambda: part_losses(run, report, folder),
            "convergence": lambda: part_convergence(run, report, folder, args.model),
            "memory": lambda: part_memory(run, report),
            "levers": lambda: part_levers(run, report, peak),
            "trainer": lambda: part_trainer(run, report, folder),
            "scale": lambda: part_scale(run, report, folder),
        }
        for name, function in parts.items():
            if name in args.skip:
                continue
            started = time.perf_counter()
            print(f"== {name}", flush=True)
            try:
                function()
            except Exception as error:  # a GPU loan is rare: the other parts still run
                if args.dry_run:
                    raise
                traceback.print_exc()
                report({"part": name, "error": f"{type(error).__name__}: {error}"})
            print(f"== {name}: {time.perf_counter() - started:.0f} s", flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({"environment": environment(), "peak_bf16_tflops": peak, "rows": rows},
                                          indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(rows))
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
