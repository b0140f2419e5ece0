"""The fault suite: commands killed (SIGKILL, no clean-up) at their worst moments, then run again: the results are
those of an uninterrupted run and nothing is left behind. Two builders of one cache at once end with one valid
cache. Faults are injected in subprocesses (``tests/faults.py``); the slowest kinds are marked ``slow``
(``pytest -m slow``), one test of each kind stays in the default run (the fit kill is
``tests/test_training.py::test_resume_after_a_kill_finishes_like_an_uninterrupted_run``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import CRANFIELD, MINILM_VOCAB, REPO, SHARED, cranfield_workdir, tiny_cv_config
from test_training import fit_config

TEST_ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
CRANFIELD_FILES = SHARED / "data" / "cranfield"


def run(arguments: list[str], tmp_path: Path, kill_before: str | None = None,
        **extra: str) -> subprocess.CompletedProcess:
    """``rerank ARGUMENTS`` in a subprocess (its own empty TMPDIR), killed before the rename of a file or folder
    named like ``kill_before`` when one is given."""
    armed = f"import faults; faults.kill_before_replace({kill_before!r}); " if kill_before else ""
    code = f"{armed}from rerank.cli import main; main({arguments!r})"
    system_temp = tmp_path / "system-tmp"
    system_temp.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**TEST_ENV, "TMPDIR": str(system_temp), **extra})


def leftovers(*folders: Path) -> list[Path]:
    """Temporary files and folders of interrupted writes (``.NAME.tmp-...``) anywhere under ``folders``."""
    return [path for folder in folders if folder.exists() for path in folder.rglob("*") if ".tmp-" in path.name]


def local_cranfield(tmp_path: Path) -> str:
    return json.dumps({"docs": str(CRANFIELD_FILES / "docs.jsonl"), "queries": str(CRANFIELD_FILES / "queries.tsv"),
                       "qrels": str(CRANFIELD_FILES / "qrels.txt"), "cache_dir": str(tmp_path / "arrow")})


@pytest.mark.skipif(not CRANFIELD_FILES.is_dir(), reason="needs ../shared/data")
def test_bm25_killed_while_publishing_its_index_reruns_to_the_same_run(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def arguments(output: str) -> list[str]:
        return ["bm25", "--data.collection", local_cranfield(tmp_path), "--data.first_stage.backend", "bm25s",
                "--data.first_stage.index_dir", str(tmp_path / "indexes"), "--output_dir", str(tmp_path / output)]

    def bm25(output: str, kill_before: str | None = None) -> subprocess.CompletedProcess:
        return run(arguments(output), tmp_path, kill_before, RERANK_CACHE=str(tmp_path / "cache"))

    killed = bm25("killed", kill_before="bm25s-")
    assert killed.returncode == -signal.SIGKILL
    assert leftovers(tmp_path / "indexes") and not list((tmp_path / "indexes").glob("bm25s-*"))  # half-built only
    again = bm25("killed")
    assert again.returncode == 0, again.stderr[-2000:]
    assert not leftovers(tmp_path / "indexes", tmp_path / "killed", tmp_path / "arrow")
    assert len(list((tmp_path / "indexes").glob("bm25s-*"))) == 1
    from rerank.cli import main

    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    main(arguments("reference"))  # in this process, from the index the second run published
    assert (tmp_path / "killed" / "first_stage.trec").read_text() == (
        tmp_path / "reference" / "first_stage.trec").read_text()
    assert not any((tmp_path / "system-tmp").iterdir())


@pytest.mark.skipif(not CRANFIELD_FILES.is_dir(), reason="needs ../shared/data")
def test_two_processes_building_one_cache_at_once_end_with_one_valid_cache(tmp_path: Path) -> None:
    arguments = ["bm25", "--data.collection", local_cranfield(tmp_path), "--data.first_stage.backend", "bm25s",
                 "--data.first_stage.index_dir", str(tmp_path / "indexes")]
    code = "from rerank.cli import main; import sys; main(sys.argv[1:])"
    processes = [subprocess.Popen([sys.executable, "-c", code, *arguments, "--output_dir", str(tmp_path / f"p{i}")],
                                  cwd=REPO, env=TEST_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
    for process in processes:
        assert process.wait(timeout=600) == 0, process.stderr.read()[-2000:]
    runs = [(tmp_path / f"p{i}" / "first_stage.trec").read_text() for i in range(2)]
    assert runs[0] == runs[1] and runs[0]
    assert len(list((tmp_path / "indexes").glob("bm25s-*"))) == 1  # one index, complete
    assert len(list((tmp_path / "arrow").iterdir())) == 1  # one Arrow table
    assert not leftovers(tmp_path / "indexes", tmp_path / "arrow")


@pytest.mark.slow
@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
def test_fit_killed_while_writing_a_checkpoint_resumes_to_the_same_result(tmp_path: Path) -> None:
    workdir = cranfield_workdir(tmp_path / "work")
    config = fit_config(workdir, tmp_path / "config.yaml")

    def fit(output: str, *extra: str, kill_before: str | None = None) -> subprocess.CompletedProcess:
        return run(["fit", "--config", str(config), "--output_dir", str(tmp_path / output), *extra], tmp_path,
                   kill_before)

    straight = fit("straight")
    assert straight.returncode == 0, straight.stderr[-2000:]
    killed = fit("resumed", kill_before="last.ckpt")  # dies with last.ckpt written to its temporary sibling
    assert killed.returncode == -signal.SIGKILL
    assert leftovers(tmp_path / "resumed") and not (tmp_path / "resumed" / "checkpoints" / "last.ckpt").exists()
    resumed = fit("resumed", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    resumed_metrics = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    for system, values in expected.items():
        assert resumed_metrics[system] == pytest.approx(values, abs=1e-6)
    assert not leftovers(tmp_path / "resumed") and not any((tmp_path / "system-tmp").iterdir())
    straight_state = torch.load(tmp_path / "straight" / "checkpoints" / "last.ckpt", weights_only=True)
    resumed_state = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)
    for name, tensor in straight_state["state_dict"].items():
        torch.testing.assert_close(resumed_state["state_dict"][name], tensor, atol=1e-6, rtol=0)


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
def test_a_second_fit_on_the_same_run_directory_refuses(tmp_path: Path) -> None:
    workdir = cranfield_workdir(tmp_path / "work")
    config = fit_config(workdir, tmp_path / "config.yaml")
    output = tmp_path / "out"
    output.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a live process
    try:
        (output / ".rerank.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid,
                                                         "command": "rerank fit", "started": "just now"}))
        second = run(["fit", "--config", str(config), "--output_dir", str(output)], tmp_path)
        assert second.returncode == 2
        assert f"{output} is being written by rerank fit (process {holder.pid}" in second.stderr
        assert sorted(path.name for path in output.iterdir()) == [".rerank.lock"]  # nothing written beside it
    finally:
        holder.kill()
        holder.wait()
    # its holder gone, the claim is stale: the next fit takes it over (as a resume after a crash does)
    assert (output / ".rerank.lock").exists()
    from rerank.core.run_directory import claimed

    with claimed(output, "test"):
        assert json.loads((output / ".rerank.lock").read_text())["pid"] == os.getpid()
    assert not (output / ".rerank.lock").exists()


def cv_config(tmp_path: Path) -> Path:
    """Two folds of a 3-fold cross-validation of a tiny BERT, 2 steps each, last.ckpt at every step."""
    workdir = cranfield_workdir(tmp_path / "work")
    config = tiny_cv_config(workdir) | {"last_checkpoint": {"every_n_train_steps": 1}}
    (tmp_path / "cv.yaml").write_text(json.dumps(config))
    return tmp_path / "cv.yaml"


def cross_validate(tmp_path: Path, output: str, *extra: str, folds: str = "1,2",
                   kill_before: str | None = None) -> subprocess.CompletedProcess:
    return run(["cv", "--config", str(tmp_path / "cv.yaml"), "--folds", folds, "--output_dir", str(tmp_path / output),
                *extra], tmp_path, kill_before)


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
def test_cv_killed_while_publishing_its_report_reruns_without_retraining(tmp_path: Path) -> None:
    cv_config(tmp_path)
    killed = cross_validate(tmp_path, "cv", folds="1", kill_before="cv_metrics.json")  # one fold: enough here
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "cv" / "cv_metrics.json").exists() and leftovers(tmp_path / "cv")
    stamps = {path: path.stat().st_mtime_ns for path in (tmp_path / "cv").glob("fold*/metrics.json")}
    assert len(stamps) == 1
    again = cross_validate(tmp_path, "cv", folds="1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert {path: path.stat().st_mtime_ns for path in stamps} == stamps  # the folds were not trained again
    from rerank.cli.cv import judged_test_queries, summarise
    from rerank.core.run_directory import CrossValidationDirectory
    from rerank.data.collection import Collection
    from rerank.data.collection_config import CollectionConfig
    from rerank.data.folds import FoldsConfig

    written = json.loads((tmp_path / "cv" / "cv_metrics.json").read_text())
    folder = CrossValidationDirectory(tmp_path / "reference")
    folder.fold(1).root.parent.mkdir(exist_ok=True)  # the same fold, summarised afresh in this process
    os.symlink(tmp_path / "cv" / "fold1", folder.fold(1).root)
    folds = FoldsConfig(**json.loads((tmp_path / "cv.yaml").read_text())["data"]["folds"])
    judged = judged_test_queries(folds, [1], Collection(CollectionConfig(**CRANFIELD)).qrels)
    assert written == summarise(folder, [1], judged, "nDCG@20")
    assert not leftovers(tmp_path / "cv") and not any((tmp_path / "system-tmp").iterdir())


@pytest.mark.slow
@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
def test_cv_killed_in_a_fold_reruns_to_the_same_report(tmp_path: Path) -> None:
    cv_config(tmp_path)

    def cv(output: str, *extra: str) -> subprocess.CompletedProcess:
        return cross_validate(tmp_path, output, *extra)

    straight = cv("straight")
    assert straight.returncode == 0, straight.stderr[-2000:]
    (tmp_path / "killed" / "fold1").mkdir(parents=True)  # fold 1 done as in the straight run; fold 2 is killed
    for name in ("metrics.json", "first_stage.trec"):
        (tmp_path / "killed" / "fold1" / name).write_bytes((tmp_path / "straight" / "fold1" / name).read_bytes())
    (tmp_path / "killed" / "fold1" / "runs").mkdir()
    for name in ("test.run", "validation.run"):
        (tmp_path / "killed" / "fold1" / "runs" / name).write_bytes(
            (tmp_path / "straight" / "fold1" / "runs" / name).read_bytes())
    killed = cv("killed", "--trainer.callbacks+=helpers.KillAtStep", "--trainer.callbacks.step=1")
    assert killed.returncode == 2 and "fold 2 failed (exit -9)" in killed.stderr
    resumed = cv("killed")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = json.loads((tmp_path / "straight" / "cv_metrics.json").read_text())
    assert json.loads((tmp_path / "killed" / "cv_metrics.json").read_text()) == expected
    assert not leftovers(tmp_path / "killed") and not (tmp_path / "killed" / ".rerank.lock").exists()
