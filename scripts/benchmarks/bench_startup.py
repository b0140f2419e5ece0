"""How fast the command line answers: ``import rerank``, ``rerank --help``, ``rerank <command> --help``, a mistyped
option and a broken config file, each in a fresh interpreter (the median wall time of ``--repeat`` runs, and which
of torch / Lightning the process loaded).

    python scripts/benchmarks/bench_startup.py --repeat 5 --output docs/experiments/bench_startup.json
    python scripts/benchmarks/bench_startup.py --checkout ../rerank-old  # another checkout's code, for a before/after

Each case runs ``python -c`` with the checkout first on ``PYTHONPATH`` and exits as a user's shell would see it, with
a cache of its own (``RERANK_CACHE``): the first case, ``rerank fit --help`` on the empty cache, is a command's first
use (its parser asked once, in a process of its own); the others read what the first uses left.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import sys
{body}
print("LOADED", ",".join(name for name in ("torch", "lightning") if name in sys.modules), file=sys.stderr)
"""
MAIN = """from rerank.cli import main
try:
    main({arguments!r})
except SystemExit:
    pass"""


def cases(broken_config: Path) -> dict[str, str]:
    """Each case's name and the Python it runs."""
    commands = {
        "rerank --help": ["--help"],
        "rerank fit --help": ["fit", "--help"],
        "rerank cv --help": ["cv", "--help"],
        "rerank predict --help": ["predict", "--help"],
        "rerank fit --data.rerank_depht 30 (typo)": ["fit", "--config", "cranfield.yaml", "--data.rerank_depht",
                                                     "30"],
        "rerank fit --config broken.yaml (YAML error)": ["fit", "--config", str(broken_config)],
    }
    return {"import rerank": "import rerank",
            **{name: MAIN.format(arguments=arguments) for name, arguments in commands.items()},
            "from rerank import Reranker": "from rerank import Reranker"}


def timed(code: str, checkout: Path, cache: Path) -> tuple[float, str]:
    """Seconds for a fresh interpreter to run ``code`` and exit; the heavy libraries it loaded."""
    environment = {**os.environ, "PYTHONPATH": str(checkout), "RERANK_CACHE": str(cache)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE.format(body=code)], capture_output=True, text=True,
                          cwd=checkout, env=environment, timeout=300)
    seconds = time.perf_counter() - started
    loaded = next((line.split(" ", 1)[1] for line in done.stderr.splitlines() if line.startswith("LOADED ")), "?")
    return seconds, loaded or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--checkout", type=Path, default=REPO, help="the repository whose code is timed")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        broken = Path(folder) / "broken.yaml"
        broken.write_text("model:\n  loss: listnet\n  optimizer: [1.0e-4\ndata:\n  rerank_depth: 30\n")
        cache = Path(folder) / "cache"
        first, loaded = timed(MAIN.format(arguments=["fit", "--help"]), args.checkout.resolve(), cache)
        results = {"`rerank fit --help`, first use (an empty cache)": {"median_s": first, "min_s": first,
                                                                       "loaded": loaded}}
        for name, code in cases(broken).items():
            timed(code, args.checkout.resolve(), cache)  # each command's first use, not timed
            runs = [timed(code, args.checkout.resolve(), cache) for _ in range(args.repeat)]
            results[name] = {"median_s": statistics.median(seconds for seconds, _ in runs),
                             "min_s": min(seconds for seconds, _ in runs), "loaded": runs[-1][1]}
    table = Table(title=f"command-line start-up, {args.checkout.resolve().name}, median of {args.repeat}")
    for column in ("case", "median s", "min s", "heavy libraries loaded"):
        table.add_column(column)
    for name, result in results.items():
        table.add_row(name, f"{result['median_s']:.2f}", f"{result['min_s']:.2f}", result["loaded"])
    Console().print(table)
    if args.output:
        args.output.write_text(json.dumps({"checkout": args.checkout.resolve().name, "repeat": args.repeat,
                                           "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
