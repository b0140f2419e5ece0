"""Every script of ``scripts/`` runs, as a user runs it, on a tiny input (the smallest sizes, a tiny model, stubs
in place of the long commands a shell script chains), so that a change below a benchmark or a reproduction cannot
break it unseen. The figures they print are measured by hand (docs/experiments/benchmarks.md), never asserted here.
``test_every_script_is_run_here`` fails on a script that no test of the suite runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import CRANFIELD, MINILM_VOCAB, REPO, SCRIPTS, cranfield_workdir, script_path, tiny_bi_encoder

from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.folds import FoldsConfig, make_split
from rerank.data.trec import Run, read_run, write_run
from rerank.evaluation.measures import evaluate

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared (MiniLM's vocabulary, Cranfield)")
ELSEWHERE = {  # scripts that other test modules run
    "bench_deployed.py": "test_bench_scripts.py", "bench_gpu.py": "test_bench_gpu.py",
    "bench_loaders.py": "test_bench_scripts.py", "bench_serve.py": "test_serve.py",
    "bench_startup.py": "test_bench_scripts.py", "calibration_table.py": "test_cv.py",
    "delta_by_length.py": "test_delta_by_length.py", "export_stage.py": "test_sources.py",
    "loss_study.py": "test_loss_study.py",
    "make_collection.py": "test_make_collection.py", "probe_teacher_feedback.py": "test_sources.py",
    "shape_collections.py": "test_bench_scripts.py", "split_half_deploy.py": "test_cv.py",
    "truncate_bert.py": "test_bench_scripts.py",
    "halves.py": "test_scripts_run.py",  # the split-half helper, run by the epoch study's test here
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT, a tiny bi-encoder, Cranfield's BM25 top 20 (``bm25.run``) and that run reversed."""
    folder = cranfield_workdir(tmp_path_factory.mktemp("scripts"))
    tiny_bi_encoder(folder / "bi")
    bm25 = read_run(folder / "bm25.run")
    reversed_ = {qid: {doc: -score for doc, score in docs.items()} for qid, docs in bm25.items()}
    write_run(reversed_, folder / "reversed.run")
    return folder


def script(name: str, *arguments: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> str:
    """``python scripts/NAME ARGUMENTS`` (or ``bash`` for a shell script) in a fresh process; its stdout."""
    runner = ["bash"] if name.endswith(".sh") else [sys.executable]
    done = subprocess.run([*runner, str(script_path(name)), *arguments], capture_output=True, text=True,
                          cwd=cwd, timeout=900, env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
    return done.stdout


def test_every_script_is_run_here() -> None:
    named = (Path(__file__).read_text(encoding="utf-8"))
    for path in SCRIPTS.values():
        elsewhere = ELSEWHERE.get(path.name)
        if elsewhere is not None:
            assert path.stem in (REPO / "tests" / elsewhere).read_text(encoding="utf-8"), path.name
        else:
            assert f'"{path.name}"' in named.replace(f'"{path.name}": ', ""), f"no test runs scripts/{path.name}"


def epoch_fold(folder: Path, k: int, epochs: list[Run], tested: Run, rule: str | None = None) -> None:
    """A hand-made fit of test fold ``k`` of a 3-fold Cranfield cv: its config (with ``evaluation.selection.epoch``
    ``rule``, or none as before the option), each epoch's validation run, and the tested weights'."""
    runs = folder / f"fold{k}" / "runs"
    runs.mkdir(parents=True)
    config = {"data": {"collection": CRANFIELD, "folds": {"scheme": "kfold", "count": 3, "seed": 7, "test": k}}}
    if rule is not None:
        config["evaluation"] = {"selection": {"epoch": rule}}
    (runs.parent / "config.yaml").write_text(yaml.safe_dump(config))
    (runs.parent / "metrics.json").write_text("{}")
    for epoch, run in enumerate(epochs):
        write_run(run, runs / f"validation.epoch{epoch}.run")
    write_run(tested, runs / "validation.run")


def test_the_epoch_study_chooses_as_its_rules_say_on_the_whole_fold_and_on_halves(workdir: Path,
                                                                                  tmp_path: Path) -> None:
    """scripts/studies/selection-rules/split_half_epoch.py. Fold 1: the first epoch is BM25, the second BM25 reversed:
    every rule but ``last`` keeps the first, on the whole fold and on every half. Fold 2: the first epoch is the second
    (BM25) with
    one query ranked ideally and one reversed, a mean gain smaller than its standard error (checked here with the
    formula, mean(d) <= sd(d) / sqrt(n)): ``best`` takes the first epoch, ``one_se`` the last. A fold whose tested
    run is not its best epoch's stops the script."""
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    bm25, reversed_ = read_run(workdir / "bm25.run"), read_run(workdir / "reversed.run")
    validation = {k: sorted(make_split(FoldsConfig(scheme="kfold", count=3, seed=7, test=k), qrels).validation)
                  for k in (1, 2)}

    def per_query(run: Run, k: int) -> dict[str, float]:
        judged = {qid: qrels[qid] for qid in validation[k]}
        return dict(zip(validation[k], evaluate(run, judged, ["nDCG@10"]).values("nDCG@10")))

    queries = validation[2]
    ideal = {qid: {doc: qrels[qid].get(doc, 0) + score * 1e-6 for doc, score in bm25[qid].items()}
             for qid in queries if qid in bm25}
    base, best, worst = per_query(bm25, 2), per_query(bm25 | ideal, 2), per_query(bm25 | reversed_, 2)

    def within_one_se(up: str, down: str) -> bool:
        difference = np.zeros(len(queries))
        difference[queries.index(up)] = best[up] - base[up]
        difference[queries.index(down)] = worst[down] - base[down]
        return 0 < difference.mean() <= difference.std(ddof=1) / np.sqrt(len(queries))

    up, down = next((up, down) for up in queries for down in queries if up != down and within_one_se(up, down))
    first = bm25 | {up: ideal[up], down: reversed_[down]}
    folder = tmp_path / "cv"
    epoch_fold(folder, 1, [bm25, reversed_], bm25)
    epoch_fold(folder, 2, [first, bm25], first)
    lines = script("split_half_epoch.py", str(folder), "--halvings", "5").splitlines()
    whole = np.mean(list(per_query(bm25, 1).values()))
    assert lines[0].startswith(f"fold1: {len(validation[1])} queries; epoch 0 {whole:.4f}")
    assert lines[0].endswith("best chooses epoch 0, one_se chooses epoch 0, last chooses epoch 1")
    assert lines[2].endswith("best chooses epoch 0, one_se chooses epoch 1, last chooses epoch 1")
    halves = dict(pair.split() for pair in lines[1].split("split-half ")[1].split(", "))
    assert halves["best"] == halves["one_se"] > halves["last"]
    epoch_fold(tmp_path / "wrong", 1, [bm25, reversed_], reversed_)
    wrong = subprocess.run([sys.executable, str(script_path("split_half_epoch.py")), str(tmp_path / "wrong")],
                           capture_output=True, text=True, cwd=REPO, timeout=600)
    assert wrong.returncode == 1 and "these are not the fit's runs" in wrong.stderr
    epoch_fold(tmp_path / "one_se", 2, [first, bm25], bm25, rule="one_se")  # a fit under one_se tested the last
    assert "one_se chooses epoch 1" in script("split_half_epoch.py", str(tmp_path / "one_se"), "--halvings", "2")


def test_the_memory_benches(tmp_path: Path) -> None:
    script("bench_candidate_memory.py", "--queries", "20", "--depth", "5", "--json", str(tmp_path / "c.json"))
    candidates = json.loads((tmp_path / "c.json").read_text())
    assert candidates and all(key in json.dumps(candidates) for key in ("dict", "arrays"))
    script("bench_index_memory.py", "--documents", "300", "--queries", "5", "--backend", "bm25s", "--depth", "10",
           "--output", str(tmp_path / "i.json"), env={"RERANK_CACHE": str(tmp_path / "cache")})
    assert json.loads((tmp_path / "i.json").read_text())


def test_the_loss_bench(tmp_path: Path) -> None:
    script("bench_losses.py", "--queries", "2", "--sizes", "10", "--losses", "listnet", "--repeats", "1",
           "--min-seconds", "0.01", "--output", str(tmp_path / "losses.json"))
    assert "listnet" in (tmp_path / "losses.json").read_text()


def test_the_inference_bench(workdir: Path, tmp_path: Path) -> None:
    script("bench_inference.py", "--model", str(workdir / "bert"), "--queries", "2", "--depth", "5",
           "--batch_size", "4", "--max_length", "64", "--repeats", "1", "--output", str(tmp_path / "inference.json"),
           env={"RERANK_CACHE": str(tmp_path / "cache")})
    results = json.loads((tmp_path / "inference.json").read_text())["results"]
    assert len(results) == 3 and all(result["pairs_per_second"] > 0 for result in results.values())


def test_the_cpu_scoring_bench_dry_run(workdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    script("bench_cpu_scoring.py", "--model", str(workdir / "bert"), "--config", "cranfield.yaml", "--run",
           str(workdir / "bm25.run"), "--dry-run", "--untrained_head", "--json", str(out))
    record = json.loads(out.read_text())
    measured = {row["path"]: row for row in record["results"] if "pairs_per_second" in row}
    assert {"rerank float32", "rerank int8", "rerank bf16", "st torch"} <= set(measured)
    assert all(0 <= row["nDCG@10"] <= 1 and row["pairs_per_second"] > 0 for row in measured.values())
    assert record["machine"]["peaks"]["float32"] > 0


def test_the_training_bench_runs_its_three_legs(workdir: Path, tmp_path: Path) -> None:
    script("bench_train.py", "--model", str(workdir / "bert"), "--list_size", "4", "--max_length", "32",
           "--steps", "3", "--warmup", "1", "--output", str(tmp_path / "train.json"),
           env={"RERANK_CACHE": str(tmp_path / "cache")})
    legs = json.loads((tmp_path / "train.json").read_text())["results"]["pairs_per_second"]
    assert list(legs) == ["(a) rerank, Lightning Trainer", "(b) hand-written loop, pre-tokenized",
                          "(c) sentence-transformers CrossEncoderTrainer"] and all(value > 0 for value in legs.values())


def test_the_click_scripts(workdir: Path, tmp_path: Path) -> None:
    from rerank.cli import main

    main(["clicks", "--config", "cranfield.yaml", "--run", str(workdir / "bm25.run"), "--clicks",
          '{"impressions": 300, "depth": 5}', "--output_dir", str(tmp_path / "clicks")])
    printed = script("click_target_quality.py", "--config", "cranfield.yaml", "--log",
                     str(tmp_path / "clicks" / "clicks.jsonl"), "--eta", "1", "--clip", "0.1")
    assert "naive" in printed and "ips" in printed
    for name, run in (("bm25", "bm25.run"), ("dla", "reversed.run")):  # rerank cv directories, as click_table reads
        folder = tmp_path / name
        folder.mkdir()
        write_run(read_run(workdir / run), folder / "test.run")
        write_run(read_run(workdir / "bm25.run"), folder / "first_stage.run")
    (tmp_path / "dla.log").write_text("INFO rerank.cli.cv: fold 1: ...\nINFO x: epoch 0: propensities learnt by "
                                      "model.click_loss, ranks 1 to 3: 1.0000, 0.5000, 0.2500\n")
    script("click_table.py", "--config", "cranfield.yaml", "--reference", f"bm25={tmp_path / 'bm25'}", "--system",
           f"dla={tmp_path / 'dla'}", "--against", "bm25", "--json", str(tmp_path / "table.json"))
    rows = json.loads((tmp_path / "table.json").read_text())["rows"]
    assert [row["system"] for row in rows] == ["bm25", "dla"] and rows[1]["propensities learnt"] == [1.0, 0.5, 0.25]
    script("interleaving_agreement.py", "--config", "cranfield.yaml", "--run", f"a={workdir / 'bm25.run'}",
           "--run", f"b={workdir / 'reversed.run'}", "--pair", "a:b", "--impressions", "100",
           "--json", str(tmp_path / "interleaving.json"))
    assert json.loads((tmp_path / "interleaving.json").read_text())


def test_the_stage_curve_and_the_reference_rankings(workdir: Path, tmp_path: Path) -> None:
    bm25, reversed_ = str(workdir / "bm25.run"), str(workdir / "reversed.run")
    script("plot_stage_curve.py", "--config", "cranfield.yaml", "--out", str(tmp_path / "curve.png"),
           "--curve", "reversed then bm25", f"10={reversed_}", f"20={bm25}", "--line", f"BM25={bm25}")
    assert (tmp_path / "curve.png").stat().st_size > 1000
    printed = script("reference_rankings.py", "--run", bm25, "--config", "cranfield", "--depth", "5", "--seeds", "2",
                     "--bi_encoder", str(workdir / "bi" / "st"), "--max_length", "32",
                     env={"RERANK_CACHE": str(tmp_path / "cache")})
    assert "random" in printed and "bi-encoder" in printed


STUB = """#!{python}
import json, sys
arguments = sys.argv[1:]
if arguments[:2] == ["-m", "rerank"]:
    arguments = arguments[2:]
if arguments[:3] == ["-m", "pip", "download"]:  # gpu_prepare.sh: a wheel of each requirement, no network
    folder = arguments[arguments.index("-d") + 1]
    for requirement in arguments:
        if "==" in requirement:
            name, version = requirement.split("==")
            open(f"{{folder}}/{{name.replace('-', '_')}}-{{version}}-py3-none-any.whl", "w").close()
elif arguments[:1] == ["-"]:  # gpu_prepare.sh: the model converted, read from stdin
    import os
    sys.stdin.read()
    os.makedirs(arguments[1])
else:  # a rerank command: checked against the stored options, as the dispatcher checks it
    from rerank.cli import schema
    from rerank.cli.configs import resolve_configs
    command, *options = arguments
    schema.check(command, resolve_configs(options), files=False)  # an earlier command of the chain makes them
with open({log!r}, "a") as handle:
    handle.write(json.dumps(arguments) + "\\n")
"""


@pytest.mark.parametrize("name", ["cranfield_ablation.sh", "cranfield_comparison.sh", "gpu_prepare.sh"])
def test_the_shell_scripts_chain_commands_that_parse(name: str, tmp_path: Path) -> None:
    stub = tmp_path / "stub"
    stub.write_text(STUB.format(python=sys.executable, log=str(tmp_path / "commands.jsonl")))
    stub.chmod(0o755)
    irds = tmp_path / "irds"
    (irds / "cranfield").mkdir(parents=True)
    script(name, str(tmp_path / "out"), env={"RERANK": str(stub), "PYTHON": str(stub), "IR_DATASETS_HOME": str(irds),
                                             "PYTHONPATH": str(REPO)})
    commands = [json.loads(line) for line in (tmp_path / "commands.jsonl").read_text().splitlines()]
    expected = {"cranfield_ablation.sh": {"teacher", "cv", "compare"},
                "cranfield_comparison.sh": {"bm25", "cv", "compare"}, "gpu_prepare.sh": {"-m", "-"}}[name]
    assert {command[0] for command in commands} == expected
