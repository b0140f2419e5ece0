"""Forward+backward time and peak memory of every loss head, beside allRank's where it has the same loss.

Times: for each (loss, list size), one fresh subprocess times rerank's loss and allRank's (where it has the
same loss) on the same inputs, taking turns in rounds of 0.1 s, so that the drift of a shared machine touches
both alike. Peak memory: a fresh subprocess per implementation, peak RSS growth over the process's baseline on
CPU, ``torch.cuda.max_memory_allocated`` on CUDA (where every measurement runs in one process unless
``--no-in-process``). Inputs: Q lists of N candidates, each list padded (3/4 to all
of N real candidates), labels 0-4.

    python scripts/benchmarks/bench_losses.py --output docs/experiments/bench_losses.json
    python scripts/benchmarks/bench_losses.py --sizes 10 100 --losses softndcg listnet --repeats 3

allRank (``pip install --no-deps allrank``) is timed when importable; its loss modules import
``allrank.data.dataset_loading`` and ``allrank.models.model_utils``, which pull torchvision, scikit-learn and
gcsfs, so this script stands in for those two modules.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from rerank import LOSSES, build_loss

# rerank loss name -> (allRank function name, keyword arguments that give the same loss)
ALLRANK = {
    "approx_ndcg": ("approxNDCGLoss", {"alpha": 10.0}),  # rerank's default temperature 0.1
    "lambdaloss": ("lambdaLoss", {"weighing_scheme": "ndcgLoss2PP_scheme", "mu": 10.0}),
    "neural_ndcg": ("neuralNDCG", {"temperature": 1.0}),
    "listnet": ("listNet", {}),
    "listmle": ("listMLE", {}),
    "ranknet": ("rankNet", {}),
}
PADDED = -1  # allRank's label for padded slots


DEVICE = {"name": "cpu"}  # the device allRank's stand-in reports (set from --device)


def _allrank_losses() -> types.ModuleType | None:
    """allRank's loss module with stand-ins for the two modules whose imports need extra packages."""
    loading = types.ModuleType("allrank.data.dataset_loading")
    loading.PADDED_Y_VALUE = PADDED
    utils = types.ModuleType("allrank.models.model_utils")
    utils.get_torch_device = lambda: torch.device(DEVICE["name"])
    sys.modules.setdefault("allrank.data.dataset_loading", loading)
    sys.modules.setdefault("allrank.models.model_utils", utils)
    try:
        import allrank.models.losses as losses
    except ImportError:
        return None
    return losses


def _inputs(queries: int, size: int, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(queries, size, generator=generator)
    labels = torch.randint(0, 5, (queries, size), generator=generator).float()
    lengths = torch.randint((3 * size) // 4, size + 1, (queries, 1), generator=generator).clamp(min=2)
    mask = torch.arange(size) < lengths
    return scores.to(device), labels.to(device), mask.to(device)


def _callable(implementation: str, name: str, labels: torch.Tensor, mask: torch.Tensor) -> Callable:
    if implementation == "rerank":
        loss = build_loss(name)
        return lambda scores: loss(scores, labels, mask)
    function_name, kwargs = ALLRANK[name]
    function = getattr(_allrank_losses(), function_name)
    padded_labels = torch.where(mask, labels, PADDED)
    return lambda scores: function(scores, padded_labels, **kwargs)


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def _call_seconds(function: Callable, scores: torch.Tensor, device: str) -> float:
    leaf = scores.clone().requires_grad_()
    start = time.perf_counter()
    function(leaf).backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def time_interleaved(name: str, implementations: list[str], queries: int, size: int, repeats: int, device: str,
                     min_seconds: float, round_seconds: float = 0.1) -> dict[str, dict]:
    """Median forward+backward milliseconds of one loss under each implementation, on the same inputs.

    The implementations take turns, each for ``round_seconds`` (at least one call) per round, until every one has
    made ``repeats`` timed calls and ``min_seconds`` have passed: a shared machine's drift over the run then
    touches all of them alike, which separate processes run one after the other cannot promise.
    """
    scores, labels, mask = _inputs(queries, size, device)
    functions = {implementation: _callable(implementation, name, labels, mask) for implementation in implementations}
    for function in functions.values():
        _call_seconds(function, scores, device)  # warm-up
    times: dict[str, list[float]] = {implementation: [] for implementation in implementations}
    started = time.perf_counter()
    while min(map(len, times.values())) < repeats or time.perf_counter() - started < min_seconds:
        for implementation, function in functions.items():
            round_started = time.perf_counter()
            while True:
                times[implementation].append(_call_seconds(function, scores, device))
                if time.perf_counter() - round_started >= round_seconds:
                    break
    return {implementation: {"median_ms": 1000 * statistics.median(values), "calls": len(values)}
            for implementation, values in times.items()}


def peak_memory(implementation: str, name: str, queries: int, size: int, device: str) -> dict:
    """Peak memory (MiB) of two forward+backward calls in this process: RSS growth over the process's
    baseline on CPU, ``torch.cuda.max_memory_allocated`` on CUDA."""
    scores, labels, mask = _inputs(queries, size, device)
    function = _callable(implementation, name, labels, mask)
    baseline = _rss_mib()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        allocated = torch.cuda.memory_allocated()
    for _ in range(2):
        _call_seconds(function, scores, device)
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - allocated) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - baseline
    return {"peak_mib": max(peak, 0.0)}


def _run_isolated(args: argparse.Namespace, mode: str, name: str, size: int, implementations: list[str]) -> dict:
    """One measurement in a fresh process (so that its peak memory is its own and a crash or timeout is contained),
    or in this one with ``--in-process`` (CUDA's peak-memory counter is reset per measurement)."""
    if args.in_process:
        try:
            return _measure_one(args, (mode, name, str(size), ",".join(implementations)))
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return {"error": "out of memory"}
    command = [sys.executable, __file__, "--_one", mode, name, str(size), ",".join(implementations),
               "--queries", str(args.queries), "--repeats", str(args.repeats),
               "--min-seconds", str(args.min_seconds), "--device", args.device]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {args.timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure_one(args: argparse.Namespace, one: tuple[str, str, str, str]) -> dict:
    mode, name, size, implementations = one
    size, implementations = int(size), implementations.split(",")
    if mode == "time":
        return time_interleaved(name, implementations, args.queries, size, args.repeats, args.device,
                                args.min_seconds)
    return peak_memory(implementations[0], name, args.queries, size, args.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=32)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 100, 200, 1000])
    parser.add_argument("--losses", nargs="+", default=sorted(LOSSES), choices=sorted(LOSSES))
    parser.add_argument("--repeats", type=int, default=5, help="at least this many timed calls")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="and keep timing for this long")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per measurement")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    parser.add_argument("--in-process", action=argparse.BooleanOptionalAction, default=None,
                        help="measure in this process (default on CUDA, whose peak memory is reset per measurement; "
                             "on CPU each measurement gets a fresh process for its RSS)")
    parser.add_argument("--_one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    DEVICE["name"] = args.device
    if args.in_process is None:
        args.in_process = args.device == "cuda"
    if args._one:
        print(json.dumps(_measure_one(args, args._one)))
        return

    implementations = ["rerank"] + (["allRank"] if _allrank_losses() is not None else [])
    console = Console() if sys.stdout.isatty() else Console(width=200)  # keep table rows on one line in logs
    results = []
    table = Table(title=f"Loss forward+backward, Q={args.queries}, {args.device} (median ms / peak MiB)")
    table.add_column("loss")
    table.add_column("impl")
    for size in args.sizes:
        table.add_column(f"N={size}", justify="right")
    rows: dict[tuple[str, str], list[str]] = {}
    with console.status("measuring") as status:
        for name in args.losses:
            compared = [i for i in implementations if i == "rerank" or name in ALLRANK]
            for size in args.sizes:
                status.update(f"{name} N={size}: time ({' and '.join(compared)}, taking turns)")
                times = _run_isolated(args, "time", name, size, compared)
                for implementation in compared:
                    status.update(f"{name} N={size}: peak memory of {implementation}")
                    memory = _run_isolated(args, "memory", name, size, [implementation])
                    result = {"loss": name, "implementation": implementation, "queries": args.queries, "size": size,
                              "device": args.device, **times.get(implementation, times), **memory}
                    results.append(result)
                    cell = result.get("error") or f"{result['median_ms']:.2f} / {result['peak_mib']:.0f}"
                    rows.setdefault((name, implementation), []).append(cell)
    for (name, implementation), cells in rows.items():
        table.add_row(name, implementation, *cells)
    console.print(table)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=1) + "\n")
        console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
