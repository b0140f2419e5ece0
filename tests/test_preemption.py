"""SIGTERM and SIGINT at each phase of ``rerank fit`` and ``rerank cv``: the command stops in one line that says
what it kept, keeps its run directory, and the same command run again ends as an uninterrupted run does.

Each fit here runs in a process of its own (``python -m rerank.fit``, as a scheduler starts it), with the fault armed
by :mod:`faults` before the command starts: the signal comes at a chosen point of a phase (an optimizer step of the
judgment-free stage or of the training, the first call of the phase's work). The uninterrupted run is made once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import CRANFIELD, MINILM_VOCAB, REPO, cranfield_workdir, flat, tiny_bi_encoder, tiny_cv_config
from safetensors.torch import load_file

from rerank.core.preemption import Preempted

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
FIT = ("import signal, sys, faults; {fault}; from rerank.cli.failures import run; from rerank.cli.fit import main; "
       "run(main, sys.argv[1:])")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A staged fit's config (a 6-step stage of pseudo-queries taught by a tiny bi-encoder, then 2 epochs of 4
    steps on qrels and the same teacher, BM25 by bm25s), its cache, and the uninterrupted run's folder."""
    root = tmp_path_factory.mktemp("preemption")
    workdir = cranfield_workdir(root / "work", dropout=0.1)
    teacher = {"bi_encoder": str(tiny_bi_encoder(root / "bi-encoder"))}
    bm25 = {"backend": "bm25s", "index_dir": str(root / "index"), "retrieval_depth": 20}
    config = {
        "model": {"model_name": str(workdir / "bert"), "loss": "listnet", "dropout": 0.1,
                  "tokenization": {"max_length": 64, "max_query_length": 16}},
        "pretrain": {"train": [{"queries": "pseudo", "pseudo": {"count": 24}, "first_stage": bm25,
                                "targets": "teacher", "teacher": teacher}], "max_steps": 6},
        "data": {"collection": CRANFIELD, "first_stage": bm25, "folds": {"scheme": "kfold", "count": 5, "test": 1},
                 "train": [{"queries": "train", "targets": "both", "teacher": teacher}], "rerank_depth": 20,
                 "list_size": 8, "batch_size": 4},
        "trainer": {"max_epochs": 2, "limit_train_batches": 4, "enable_progress_bar": False,
                    "num_sanity_val_steps": 0, "logger": False},
        "last_checkpoint": {"every_n_train_steps": 3},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    setup = {"root": root, "config": path, "env": {**ENV, "RERANK_CACHE": str(root / "cache")}}
    done = fit(setup, "straight")
    assert done.returncode == 0, done.stderr[-3000:]
    return setup


def fit(setup: dict, output: str, fault: str = "pass", cache: str | None = None) -> subprocess.CompletedProcess:
    """``rerank fit`` of the setup's config into ``output``, with ``fault`` armed (a statement of :mod:`faults`)."""
    env = setup["env"] if cache is None else {**setup["env"], "RERANK_CACHE": str(setup["root"] / cache)}
    command = [sys.executable, "-c", FIT.format(fault=fault), "--config", str(setup["config"]), "--output_dir",
               str(setup["root"] / output)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


PHASES = {
    "the judgment-free stage": "faults.signal_at_step('the judgment-free stage', 3)",
    "the training folds": "faults.signal_at_step('the training', 5)",
    "testing": "faults.signal_on_call('rerank.training.lightning_module:RerankModule.test_step')",
    "the first stage": "faults.signal_on_call('rerank.training.datamodule:RerankDataModule._write_first_stage_run')",
    "the training lists (their candidates and teacher scores)":
        "faults.signal_on_call('rerank.training.sources:teacher_scores')",
    "the export": "faults.signal_on_call('rerank.training.fitting:export')",
    "the training folds, by Ctrl-C": "faults.signal_at_step('the training', 5, signal.SIGINT)",
}
KEPT = {"the judgment-free stage": "the judgment-free stage is saved at step 3",
        "the training folds": "the training is saved at step 5"}
SLOW = ("testing", "the first stage", "the training lists (their candidates and teacher scores)", "the export",
        "the training folds, by Ctrl-C")


@pytest.mark.parametrize("phase", [pytest.param(phase, marks=pytest.mark.slow) if phase in SLOW else phase
                                   for phase in PHASES])
def test_a_signal_at_each_phase_stops_saved_and_the_same_command_resumes_to_the_same_result(setup: dict,
                                                                                          phase: str) -> None:
    name = "-".join(phase.replace(",", "").split()[:5])
    output = setup["root"] / name
    cache = f"cache-{name}"  # a cache of its own: the stage is trained (and stopped), not loaded
    stopped = fit(setup, output.name, PHASES[phase], cache=cache)
    signum, during = (signal.SIGINT, "the training folds") if "Ctrl-C" in phase else (signal.SIGTERM, phase)
    assert stopped.returncode == 128 + signum, stopped.stderr[-3000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rerank: stopped by {signal.Signals(signum).name} during {during}; "), last
    assert last.endswith(": run the same command again to resume")
    assert KEPT.get(during, "") in last and "Traceback" not in stopped.stderr
    record = json.loads((output / "preempted.json").read_text())
    assert record["phase"] == during and record["signal"] == signum
    assert not (output / "metrics.json").exists() and not (output / ".rerank.lock").exists()
    assert not any(".tmp-" in path.name for path in output.rglob("*"))  # nothing half-written
    resumed = fit(setup, output.name, cache=cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not (output / "preempted.json").exists() and not list(output.glob("pretrain/*.resume.ckpt"))
    if phase == "the judgment-free stage":
        assert "resuming from" in resumed.stderr and "the weights from the cache" not in resumed.stderr
    assert_same_fit(setup["root"] / "straight", output)


def assert_same_fit(expected: Path, got: Path) -> None:
    """The same metrics (to 1e-6), the same test runs' rankings and the same exported weights (to 1e-6)."""
    metrics, resumed = (json.loads((folder / "metrics.json").read_text()) for folder in (expected, got))
    deployed, straight = resumed.pop("deployment"), metrics.pop("deployment")
    assert deployed["ranker"] == straight["ranker"]
    assert deployed["validation"] == pytest.approx(straight["validation"], abs=1e-6)
    assert set(metrics) == set(resumed)
    for system, values in metrics.items():  # the calibration's figures too: fitted on the same validation run
        assert flat(resumed[system]) == pytest.approx(flat(values), abs=1e-6), system
    for name in ("test.run", "validation.run"):
        assert [line.split()[:4] for line in (expected / "runs" / name).read_text().splitlines()] == \
            [line.split()[:4] for line in (got / "runs" / name).read_text().splitlines()]
    weights, other = (load_file(folder / "model" / "model.safetensors") for folder in (expected, got))
    assert set(weights) == set(other)
    for name, tensor in weights.items():
        torch.testing.assert_close(other[name], tensor, atol=1e-6, rtol=0)


def test_a_stopped_fit_refuses_to_resume_under_another_config(setup: dict) -> None:
    output = setup["root"] / "other-config"
    output.mkdir()
    stopped = {"config": "0123456789abcdef", "signal": 15, "phase": "the training folds",
               "stopped": "2026-12-01 10:00:00"}
    (output / "preempted.json").write_text(json.dumps(stopped))
    command = [sys.executable, "-m", "rerank", "fit", "--config", str(setup["config"]), "--output_dir", str(output)]
    done = subprocess.run(command, cwd=REPO, env=setup["env"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {output} holds a fit stopped by a signal (the training folds, 2026-12-01 10:00:00) under another "
        "config: resume it with its own command, or give another --output_dir"]
    assert sorted(path.name for path in output.iterdir()) == ["preempted.json"]  # nothing started


def test_the_stopping_message_says_what_was_kept() -> None:
    stopped = Preempted(signal.SIGINT, "testing")
    assert str(stopped) == ("stopped by SIGINT during testing; what was finished before it is kept: run the same "
                            "command again to resume")
    assert stopped.exit_status == 130


def test_cv_passes_a_sigterm_on_to_its_fold_which_stops_saved_and_the_same_command_resumes(tmp_path: Path) -> None:
    workdir = cranfield_workdir(tmp_path / "work")
    config = tiny_cv_config(workdir) | {"last_checkpoint": {"every_n_train_steps": 1}}
    path = tmp_path / "cv.yaml"
    path.write_text(json.dumps(config))
    env = {**ENV, "RERANK_CACHE": str(tmp_path / "cache")}

    def cv(output: str, fault: str = "pass") -> subprocess.CompletedProcess:
        code = (f"import sys, faults; {fault}; from rerank.cli.failures import run; from rerank.cli.cv import main; "
                "run(main, sys.argv[1:])")
        return subprocess.run([sys.executable, "-c", code, "--config", str(path), "--folds", "2", "--output_dir",
                               str(tmp_path / output)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)

    straight = cv("straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    # the signal reaches cv alone (as Kubernetes sends it to a container's first process) once its fold has a
    # checkpoint
    checkpoint = str(tmp_path / "stopped" / "fold2" / "checkpoints" / "last.ckpt")
    stopped = cv("stopped", f"faults.signal_when_exists({checkpoint!r})")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert stopped.stderr.strip().splitlines()[-1].startswith("rerank: stopped by SIGTERM during fold 2; fold 2 saved")
    assert (tmp_path / "stopped" / "fold2" / "preempted.json").is_file()  # the fold saved itself, and said so
    resumed = cv("stopped")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((tmp_path / "stopped" / "cv_metrics.json").read_text()) == json.loads(
        (tmp_path / "straight" / "cv_metrics.json").read_text())
