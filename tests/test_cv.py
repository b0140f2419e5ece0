"""Cross-validation (``rerank cv``) and the comparison report (``rerank compare``) on Cranfield with a tiny BERT."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import CRANFIELD, MINILM_VOCAB, REPO, cranfield_workdir, script_path, tiny_cv_config
from scipy import stats

from rerank.cli import compare, cv
from rerank.cli.summary import cv_summary
from rerank.config.selection import SelectionRules
from rerank.config.teacher import TeacherConfig
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.folds import kfold
from rerank.data.trec import read_run, restrict, write_run
from rerank.evaluation.measures import evaluate
from rerank.ranker.selection import ValidationRuns, select

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
MEASURES = ("nDCG@10", "MAP", "MRR")  # not the default set: cv reports what the fits report


@pytest.fixture(scope="module")
def cv_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Folds 1 and 2 of a 3-fold cross-validation (2 training steps and a validation each); the config."""
    folder = cranfield_workdir(tmp_path_factory.mktemp("cv"))
    bm25 = read_run(folder / "bm25.run")  # a teacher that ranks the candidates backwards, for the fused run
    write_run({qid: {doc: -score for doc, score in docs.items()} for qid, docs in bm25.items()}, folder / "teacher.run")
    config = tiny_cv_config(folder, teacher=folder / "teacher.run")
    config["evaluation"] = {"metrics": list(MEASURES), "selection": {"measure": "nDCG@10", "interpolate": True}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    cv.main(["--config", str(folder / "config.yaml"), "--output_dir", str(folder / "listnet"), "--folds", "1,2"])
    return folder / "listnet", folder / "config.yaml"


def test_cv_concatenates_the_folds_and_reports_over_folds(cv_dir: tuple[Path, Path]) -> None:
    folder, _ = cv_dir
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    folds = kfold(qrels, 3, 7)
    test = read_run(folder / "test.run")
    assert sorted(test) == sorted(folds[0] + folds[1])  # every test query of folds 1 and 2, once
    report = json.loads((folder / "cv_metrics.json").read_text())
    assert all(list(values) == list(MEASURES) for values in report["all_queries"].values())
    assert all(list(values) == list(MEASURES) for values in report["over_folds"].values())
    for system, name in (("reranker", "test.run"), ("first_stage", "first_stage.run"),
                         ("interpolated", "test.interpolated.run"), ("fused", "test.fused.run")):
        run = read_run(folder / name)
        assert sorted(run) == sorted(test)
        expected = evaluate(run, {q: qrels[q] for q in run}, ["nDCG@10", "MAP"]).mean
        assert report["all_queries"][system]["nDCG@10"] == pytest.approx(expected["nDCG@10"], abs=1e-9)
        per_fold = [json.loads((folder / f"fold{k}" / "metrics.json").read_text())[system]["MAP"] for k in (1, 2)]
        assert report["over_folds"][system]["MAP"]["mean"] == pytest.approx(statistics.fmean(per_fold))
        assert report["over_folds"][system]["MAP"]["stderr"] == pytest.approx(statistics.stdev(per_fold) / math.sqrt(2))
    assert all(len(docs) == 10 for docs in read_run(folder / "first_stage.run").values())


def test_a_judged_query_without_candidates_counts_0_over_all_queries_as_in_its_fold(cv_dir: tuple[Path, Path],
                                                                                    tmp_path: Path) -> None:
    """The cv's figures over all queries and its t-tests count a judged test query that has no candidates as 0, as
    the fold's own metrics.json does (a one-fold cv: the two must be equal)."""
    folder, config_path = cv_dir
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    lost = kfold(qrels, 3, 7)[0][0]  # a judged query of test fold 1
    bm25 = read_run(folder.parent / "bm25.run")
    write_run({qid: docs for qid, docs in bm25.items() if qid != lost}, tmp_path / "first_stage.run")
    config = yaml.safe_load(config_path.read_text())
    config["data"]["first_stage"]["run"] = str(tmp_path / "first_stage.run")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    report = cv.main(["--config", str(tmp_path / "config.yaml"), "--output_dir", str(tmp_path / "cv"), "--folds", "1"])
    fold = json.loads((tmp_path / "cv" / "fold1" / "metrics.json").read_text())
    assert lost not in read_run(tmp_path / "cv" / "test.run")
    for system in ("reranker", "first_stage", "deployed"):
        assert report["all_queries"][system] == pytest.approx(report["per_fold"][system][0], abs=1e-12)
    assert report["all_queries"]["reranker"]["nDCG@10"] == pytest.approx(fold["reranker"]["nDCG@10"], abs=1e-12)
    assert report["deployed"]["tests"]["first_stage"]["queries"] == len(kfold(qrels, 3, 7)[0])


def test_each_folds_written_runs_measure_what_its_metrics_report(cv_dir: tuple[Path, Path]) -> None:
    """trec_eval on a fold's run files gives its metrics.json figures exactly (scores are written in full)."""
    folder, _ = cv_dir
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    for k, test_queries in zip((1, 2), kfold(qrels, 3, 7)):
        metrics = json.loads((folder / f"fold{k}" / "metrics.json").read_text())
        judged = {q: qrels[q] for q in test_queries}
        for system, name in (("reranker", "test.run"), ("teacher", "test.teacher.run"),
                             ("interpolated", "test.interpolated.run"), ("fused", "test.fused.run")):
            figures = evaluate(read_run(folder / f"fold{k}" / "runs" / name), judged, list(MEASURES)).mean
            assert figures == {m: metrics[system][m] for m in MEASURES}, (k, system)


def test_cv_reports_each_folds_deployed_ranker_with_paired_t_tests(cv_dir: tuple[Path, Path]) -> None:
    folder, _ = cv_dir
    report = json.loads((folder / "cv_metrics.json").read_text())
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    folds = [json.loads((folder / f"fold{k}" / "metrics.json").read_text())["deployment"] for k in (1, 2)]
    assert report["deployed"]["per_fold"] == [fold["ranker"] for fold in folds]
    for fold in folds:  # the teacher is a fixed run here: fused cannot score new queries, so it is not deployed
        assert fold["ranker"] in ("reranker", "interpolated") and "fixed TREC run" in fold["excluded"]["fused"]
    expected = {}
    for k, fold in zip((1, 2), folds):
        expected |= read_run(folder / f"fold{k}" / "runs" / ("test.run" if fold["ranker"] == "reranker"
                                                               else f"test.{fold['ranker']}.run"))
    deployed = read_run(folder / "test.deployed.run")
    assert deployed == expected  # every query scored by its own fold's deployed ranker
    judged = {q: qrels[q] for q in deployed}
    assert report["all_queries"]["deployed"]["MAP"] == pytest.approx(evaluate(deployed, judged, ["MAP"]).mean["MAP"])
    ours = evaluate(deployed, judged, ["nDCG@10"]).per_query
    for baseline, name in (("first_stage", "first_stage.run"), ("teacher", "test.teacher.run")):
        theirs = evaluate(read_run(folder / name), judged, ["nDCG@10"]).per_query
        differences = [ours[q]["nDCG@10"] - theirs[q]["nDCG@10"] for q in sorted(judged)]
        test = report["deployed"]["tests"][baseline]
        assert test["queries"] == len(judged)
        assert test["difference"] == pytest.approx(statistics.fmean(differences))
        t = statistics.fmean(differences) / (statistics.stdev(differences) / math.sqrt(len(differences)))
        assert test["p"] == pytest.approx(2 * stats.t.sf(abs(t), df=len(differences) - 1), rel=1e-6)


def test_cv_pools_each_folds_calibrated_test_pairs(cv_dir: tuple[Path, Path]) -> None:
    """The pooled figures against each fold's map applied by hand to its deployed test run, the folds' pairs
    concatenated; each fold's own figures as its metrics.json gives them."""
    folder, _ = cv_dir
    report = json.loads((folder / "cv_metrics.json").read_text())["calibration"]
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    probabilities, raw, labels = [], [], []
    for k in (1, 2):
        metrics = json.loads((folder / f"fold{k}" / "metrics.json").read_text())
        assert report["per_fold"][k - 1] == metrics["calibration"]
        saved = json.loads((folder / f"fold{k}" / "model" / "config.json").read_text())["rerank"]["calibration"]
        ranker = metrics["deployment"]["ranker"]
        run = read_run(folder / f"fold{k}" / "runs" / ("test.run" if ranker == "reranker" else f"test.{ranker}.run"))
        for qid in run:
            for doc, score in run[qid].items():
                if saved["method"] == "platt":
                    p = 1 / (1 + math.exp(-(saved["parameters"]["slope"] * score + saved["parameters"]["intercept"])))
                else:
                    p = float(np.interp(score, saved["parameters"]["scores"], saved["parameters"]["probabilities"]))
                probabilities.append(p)
                raw.append(1 / (1 + math.exp(-score)))
                labels.append(1.0 if qrels[qid].get(doc, 0) >= 1 else 0.0)
    pooled = report["pooled"]
    assert pooled["folds"] == 2 and pooled["pairs"] == len(labels)
    for name, values in (("calibrated", probabilities), ("raw_sigmoid", raw)):
        assert pooled[name]["brier"] == pytest.approx(np.mean((np.array(values) - np.array(labels)) ** 2))
    printed = subprocess.run([sys.executable, str(script_path("calibration_table.py")), str(folder)],
                             capture_output=True, text=True, check=True).stdout
    row = f"| **listnet, pooled** | each fold its own | {len(labels)} | {pooled['raw_sigmoid']['ece']:.4f} |"
    assert row in printed
    summary = cv_summary(json.loads((folder / "cv_metrics.json").read_text()), "nDCG@10", folder)
    line = f"calibrated: over the {len(labels)} test pairs of 2 folds, each by its fold's map, ECE"
    assert any(isinstance(printed, str) and printed.startswith(line) for printed in summary)


def z_scores(scores: dict[str, float], docs: list[str]) -> np.ndarray:
    values = np.array([scores[doc] for doc in docs])
    return (values - values.mean()) / values.std() if values.std() > 0 else np.zeros(len(docs))


def test_the_fused_run_mixes_the_reranker_teacher_and_first_stage_with_the_validation_weights(
        cv_dir: tuple[Path, Path]) -> None:
    folder, _ = cv_dir
    for fold in (1, 2):
        runs = folder / f"fold{fold}" / "runs"
        metrics = json.loads((folder / f"fold{fold}" / "metrics.json").read_text())["fused"]
        weights = [metrics["w_reranker"], metrics["w_teacher"], metrics["w_first_stage"]]
        assert sum(weights) == pytest.approx(1.0) and all(w in [step / 10 for step in range(11)] for w in weights)
        reranker, teacher = read_run(runs / "test.run"), read_run(runs / "test.teacher.run")
        first_stage, fused = read_run(folder / f"fold{fold}" / "first_stage.trec"), read_run(runs / "test.fused.run")
        assert sorted(fused) == sorted(reranker) == sorted(teacher)
        for qid, scores in fused.items():
            docs = sorted(reranker[qid])
            assert sorted(scores) == docs and sorted(teacher[qid]) == docs
            expected = sum(w * z_scores(run[qid], docs) for w, run in zip(weights, (reranker, teacher, first_stage)))
            np.testing.assert_allclose([scores[doc] for doc in docs], expected, atol=2e-5)


def test_the_split_half_script_recomputes_each_folds_deployment_from_its_files(cv_dir: tuple[Path, Path]) -> None:
    """scripts/studies/selection-rules/split_half_deploy.py rebuilds each fold's deployed ranker from its written runs
    (it stops when it cannot) and reads the teacher on the test folds as trec_eval does; with a fixed-run teacher
    ``fused`` is not
    deployable, so the rules it compares choose alike (``cross_fit``'s check never runs)."""
    folder, _ = cv_dir
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels  # what the script reads from the folds' config
    teacher_path = folder.parent / "teacher.run"
    done = subprocess.run([sys.executable, str(script_path("split_half_deploy.py")), str(folder),
                           "--teacher", str(teacher_path), "--halvings", "3", "--test", "--pooled", "--cross-fit"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for k in (1, 2):
        deployment = json.loads((folder / f"fold{k}" / "metrics.json").read_text())["deployment"]
        assert f"fold{k}: simplex deploys {deployment['ranker']} " in done.stdout
    # pooled: fold 1's fit may pool nothing (fold 2's fit validated on fold 1, its test fold); fold 2's pools
    # fold 1's validation queries, scored by fold 1's fit, with its own: select() on the union, recomputed here
    choices = dict(line.split(" deploys ")[0:2] for line in done.stdout.splitlines() if " deploys " in line)
    assert choices["fold1: pooled "].split(", validation")[0] == choices["fold1: anchored"].split(", validation")[0]
    for k in (1, 2):  # a fixed-run teacher is not deployable: no check against it, so cross_fit chooses as anchored
        assert choices[f"fold{k}: cross_fit"] == choices[f"fold{k}: anchored"]
    teacher, parts = read_run(teacher_path), []
    for k in (1, 2):
        reranker = read_run(folder / f"fold{k}" / "runs" / "validation.run")
        parts.append((reranker, restrict(read_run(folder / f"fold{k}" / "first_stage.trec"), reranker)))
    union = [{qid: docs for part in parts for qid, docs in part[i].items()} for i in (0, 1)]
    pooled = select(ValidationRuns(*union, restrict(teacher, union[0]), TeacherConfig(run=str(teacher_path))),
                    {qid: qrels[qid] for qid in union[0] if qid in qrels}, SelectionRules("nDCG@10", interpolate=True))
    weights = tuple(pooled.deployment.weights.values())
    assert choices["fold2: pooled "].startswith(f"{pooled.deployment.ranker} {weights}, validation")
    estimates = dict(line.split(": ")[0:2] for line in done.stdout.splitlines() if line.startswith("split-half"))
    assert estimates["split-half estimate, simplex"].split()[0] == estimates["split-half estimate, line"].split()[0]
    test = read_run(folder / "test.run")
    teacher = read_run(teacher_path)
    expected = evaluate({q: {d: teacher[q][d] for d in docs} for q, docs in test.items()},
                        {q: qrels[q] for q in test}, ["nDCG@10"]).mean["nDCG@10"]
    assert f"queries: teacher {expected:.4f}" in done.stdout


def test_cv_skips_finished_folds(cv_dir: tuple[Path, Path]) -> None:
    folder, config = cv_dir
    stamp = (folder / "fold1" / "metrics.json").stat().st_mtime_ns
    cv.main(["--config", str(config), "--output_dir", str(folder), "--folds", "1"])
    assert (folder / "fold1" / "metrics.json").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="--folds 4: data.folds defines folds 1..3"):
        cv.main(["--config", str(config), "--output_dir", str(folder), "--folds", "4"])


def test_compare_reports_bonferroni_corrected_paired_t_tests(cv_dir: tuple[Path, Path], tmp_path: Path) -> None:
    folder, _ = cv_dir
    report = compare.main([str(folder), "--config", "cranfield", "--output", str(tmp_path)])
    assert report["baseline"] == "first_stage"
    assert list(report["results"]) == ["first_stage", "listnet", "listnet/interpolated", "listnet/fused"]
    assert report["comparisons"] == 3 * len(compare.MEASURES)
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    ours, theirs = read_run(folder / "test.run"), read_run(folder / "first_stage.run")
    queries = sorted(theirs)
    a = evaluate(ours, {q: qrels[q] for q in queries}, ["nDCG@20"]).per_query
    b = evaluate(theirs, {q: qrels[q] for q in queries}, ["nDCG@20"]).per_query
    differences = [a[q]["nDCG@20"] - b[q]["nDCG@20"] for q in queries]
    t = statistics.fmean(differences) / (statistics.stdev(differences) / math.sqrt(len(differences)))
    p = 2 * stats.t.sf(abs(t), df=len(differences) - 1)  # the paired t-test written out
    test = report["tests"][("listnet", "nDCG@20")]
    assert test["p"] == pytest.approx(p, rel=1e-6)
    assert test["significant"] == (p < 0.05 / report["comparisons"])
    table = (tmp_path / "report.md").read_text()
    assert table.splitlines()[0] == "| system | " + " | ".join(compare.MEASURES) + " |"
    assert f"{report['results']['listnet'].mean['nDCG@20']:.4f}" in table
    assert (tmp_path / "per_query_ndcg20.png").stat().st_size > 1000 and (tmp_path / "per_fold.png").is_file()
    systems = (("first_stage", "first_stage.run"), ("listnet", "test.run"),
               ("listnet/interpolated", "test.interpolated.run"), ("listnet/fused", "test.fused.run"))
    folds = json.loads((folder / "cv_metrics.json").read_text())["folds"]  # the last rerank.cv call's folds
    for system, name in systems:
        plotted = compare.fold_values(folder, system, compare.PER_FOLD_MEASURES)  # the bars of per_fold.png
        assert list(plotted) == folds
        run = read_run(folder / name)  # these folds' test queries
        for fold in folds:
            fold_queries = sorted(read_run(folder / f"fold{fold}" / "runs" / "test.run"))
            expected = evaluate({q: run[q] for q in fold_queries}, {q: qrels[q] for q in fold_queries}, ["MAP"])
            assert plotted[fold]["MAP"] == pytest.approx(expected.mean["MAP"], abs=1e-6)


def test_compare_names_run_files_with_the_same_stem_by_their_folder(tmp_path: Path) -> None:
    for system in ("hinge", "smoothi"):
        (tmp_path / system).mkdir()
        write_run({"1": {"d1": 1.0}}, tmp_path / system / "test.run")
    files = [str(tmp_path / system / "test.run") for system in ("hinge", "smoothi")]
    assert list(compare.load_systems(files)) == ["hinge/test", "smoothi/test"]
    assert list(compare.load_systems(files[:1])) == ["test"]
    with pytest.raises(ValueError, match="two systems would be named 'hinge/test'"):
        compare.load_systems(files[:1] * 2)
    teacher = tmp_path / "teacher"  # a cv directory and a run file of the same name
    teacher.mkdir()
    for name in ("test.run", "first_stage.run", "teacher.trec"):
        write_run({"1": {"d1": 1.0}}, teacher / name)
    assert list(compare.load_systems([str(teacher), str(teacher / "teacher.trec")])) == [
        "first_stage", "teacher", "teacher/teacher"]


def test_cv_rotates_the_folds_that_fit_sees(cv_dir: tuple[Path, Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _, config = cv_dir
    launched: list[list[str]] = []
    monkeypatch.setattr(cv, "_run_fold", lambda command, fold, root: launched.append(command) or 0)
    monkeypatch.setattr(cv, "summarise", lambda folder, folds, qrels, measure: {"folds": folds})
    monkeypatch.setattr(cv, "cv_summary", lambda report, measure, root: [])
    report = cv.main(["--config", str(config), "--output_dir", str(tmp_path), "--data.folds.count", "10"])
    assert report["folds"] == list(range(1, 11))
    for fold, command in enumerate(launched, start=1):
        options = dict(zip(command[4::2], command[5::2]))  # python -m rerank fit --option value ...
        assert command[1:4] == ["-m", "rerank", "fit"]
        assert options["--data.folds.count"] == "10" and options["--data.folds.test"] == str(fold)
        assert options["--output_dir"] == str(tmp_path / f"fold{fold}")
    assert len(launched) == 10
