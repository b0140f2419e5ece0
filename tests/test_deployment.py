"""The deployed ranker: chosen on validation by the written rule, exported with everything it needs, and what
``rerank predict``, the Python API and the fit's own summary give, against the fit's own test runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import CRANFIELD, MINILM_VOCAB, cranfield_workdir, tiny_bi_encoder
from scipy import stats

from rerank.cli import fit, predict
from rerank.cli.summary import ROWS, calibration_summary_lines
from rerank.config.teacher import TeacherConfig
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.trec import ranked, read_run
from rerank.evaluation.calibration import Calibration, fit_calibration
from rerank.evaluation.fusion import standardise
from rerank.evaluation.measures import evaluate
from rerank.inference.reranker import Reranker
from rerank.ranker.deployment import TEACHER_ALONE, Deployment, beats_teacher, choose, deployable_teacher

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
FOLDS = {"scheme": "kfold", "count": 5, "seed": 42, "test": 1}


def test_the_rule_takes_the_best_on_validation_and_ties_go_to_the_simpler() -> None:
    assert choose({"reranker": 0.40, "interpolated": 0.41, "fused": 0.43}) == "fused"
    assert choose({"reranker": 0.40, "interpolated": 0.43, "fused": 0.43}) == "interpolated"
    assert choose({"reranker": 0.43, "interpolated": 0.43, "fused": 0.43}) == "reranker"
    assert choose({"fused": 0.5, "reranker": 0.43}) == "fused"  # not the order given: RANKERS' order
    assert choose({"reranker": 0.45, "interpolated": 0.44}) == "reranker"


@pytest.mark.parametrize("seed", range(6))
def test_a_ranker_beats_the_teacher_when_its_gain_exceeds_one_standard_error(seed: int) -> None:
    """beats_teacher against scipy's one-sample t statistic of the per-query differences (t > 1 is mean > sd /
    sqrt(n)), on random validation figures with gains around the threshold."""
    generator = np.random.default_rng(seed)
    teacher = generator.uniform(0, 1, 50)
    chosen = np.clip(teacher + generator.normal(0.02 * (seed - 2), 0.1, 50), 0, 1)
    assert beats_teacher(chosen, teacher) == (stats.ttest_1samp(chosen - teacher, 0).statistic > 1)
    assert not beats_teacher(teacher, teacher)  # no gain: the teacher
    assert not beats_teacher([0.9], [0.1])  # one query shows nothing


def test_only_a_teacher_that_scores_new_queries_is_deployable(tmp_path: Path) -> None:
    assert deployable_teacher(TeacherConfig(bi_encoder="some/bi-encoder")) is None
    assert "fixed TREC run" in deployable_teacher(TeacherConfig(run=str(tmp_path / "t.run")))
    assert "born-again student" in deployable_teacher(TeacherConfig(bi_encoder="x", student=str(tmp_path)))
    with pytest.raises(ValueError, match="the fused ranker needs its teacher"):
        Deployment("fused", {"reranker": 0.5, "teacher": 0.5, "first_stage": 0.0})
    with pytest.raises(ValueError, match="must sum to 1"):
        Deployment("interpolated", {"reranker": 0.5, "first_stage": 0.6})


def test_the_deployed_fusion_is_the_weighted_sum_of_z_scores() -> None:
    reranker, teacher, first = {"q": {"a": 3.0, "b": 1.0, "c": 2.0}}, {"q": {"a": 0.1, "b": 0.3, "c": 0.2}}, {
        "q": {"a": 10.0, "b": 10.0, "c": 13.0}}
    deployment = Deployment("fused", {"reranker": 0.2, "teacher": 0.5, "first_stage": 0.3},
                            teacher=TeacherConfig(bi_encoder="x"))
    fused = deployment.combine(reranker, first, teacher)["q"]
    z = {"r": [1.224745, -1.224745, 0.0], "t": [-1.224745, 1.224745, 0.0], "f": [-0.707107, -0.707107, 1.414214]}
    for index, doc in enumerate("abc"):  # z-scores worked out by hand: (s - mean) / population std
        assert fused[doc] == pytest.approx(0.2 * z["r"][index] + 0.5 * z["t"][index] + 0.3 * z["f"][index], abs=1e-5)
    assert standardise({"a": 1.0, "b": 1.0}) == {"a": 0.0, "b": 0.0}
    with pytest.raises(ValueError, match="mixes teacher"):
        deployment.combine(reranker, first)
    no_teacher = Deployment("fused", {"reranker": 0.7, "teacher": 0.0, "first_stage": 0.3},
                            teacher=TeacherConfig(bi_encoder="x", first_stage_weight=0.4))
    assert not no_teacher.needs_teacher and no_teacher.needs_first_stage  # a weight of 0: no teacher to load
    assert no_teacher.combine(reranker, first) == Deployment(
        "fused", {"reranker": 0.7, "teacher": 0.0, "first_stage": 0.3}, teacher=TeacherConfig(bi_encoder="x")).combine(
        reranker, first, teacher)  # with or without the teacher's scores, which weigh 0


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fits of a tiny BERT on Cranfield with a tiny bi-encoder teacher mixed with BM25, one for each deployed
    ranker (``evaluation.selection.deploy``), and one left to the rule; their run directories."""
    folder = cranfield_workdir(tmp_path_factory.mktemp("deployment"))
    teacher = {"bi_encoder": str(tiny_bi_encoder(folder / "bi")), "max_length": 64, "first_stage_weight": 0.4}
    fitted = {}
    for deploy in ("interpolated", "fused", "auto"):
        config = {"model": {"model_name": str(folder / "bert"), "loss": "listnet",
                            "tokenization": {"max_length": 40, "max_query_length": 12}},
                  "evaluation": {"selection": {"measure": "nDCG@10", "interpolate": True, "deploy": deploy}},
                  "data": {"collection": CRANFIELD, "first_stage": {"backend": "run", "run": str(folder / "bm25.run")},
                           "folds": FOLDS, "rerank_depth": 20, "list_size": 4, "batch_size": 2,
                           "train": [{"queries": "train", "targets": "both", "teacher": teacher}]},
                  "trainer": {"max_epochs": 1, "limit_train_batches": 3, "enable_progress_bar": False,
                              "logger": False, "num_sanity_val_steps": 0}}
        (folder / f"{deploy}.yaml").write_text(json.dumps(config))
        fitted[deploy] = folder / deploy
        fit.main(["--config", str(folder / f"{deploy}.yaml"), "--output_dir", str(fitted[deploy])])
    return fitted


def predicted(run_directory: Path, output: Path, *options: str) -> dict:
    """``rerank predict`` with a fit's export, config and first-stage run, on its test queries."""
    return predict.main(["--config", str(run_directory / "config.yaml"), "--model.model_name",
                         str(run_directory / "model"), "--run", str(run_directory / "first_stage.trec"),
                         "--data.predict_queries", "test", "--output_dir", str(output), "--trainer.logger", "false",
                         "--trainer.enable_progress_bar", "false", *options])


@pytest.mark.parametrize("ranker", ["interpolated", "fused"])
def test_predict_reproduces_the_fits_test_run_of_the_deployed_ranker(fits: dict[str, Path], tmp_path: Path,
                                                                     ranker: str) -> None:
    run_directory = fits[ranker]
    metrics = json.loads((run_directory / "metrics.json").read_text())
    assert metrics["deployment"]["ranker"] == ranker
    config = json.loads((run_directory / "model" / "config.json").read_text())
    assert config["rerank"]["deployment"]["ranker"] == ranker  # the export carries it
    report = predicted(run_directory, tmp_path)
    expected, got = (read_run(path) for path in (run_directory / "runs" / f"test.{ranker}.run",
                                                 tmp_path / "runs" / "reranked.run"))
    assert sorted(got) == sorted(expected) and len(got) == 45
    for qid, scores in expected.items():
        assert [doc for doc, _ in ranked(got[qid])] == [doc for doc, _ in ranked(scores)]  # the same order
        assert max(abs(got[qid][doc] - score) for doc, score in scores.items()) <= 1e-5
    pure, fitted_pure = read_run(tmp_path / "runs" / "reranked.reranker.run"), read_run(run_directory / "runs" /
                                                                                           "test.run")
    assert max(abs(pure[q][d] - s) for q, docs in fitted_pure.items() for d, s in docs.items()) <= 1e-5
    for system in (ranker, "reranker", "first_stage"):
        assert report[system]["nDCG@10"] == pytest.approx(metrics[system]["nDCG@10"], abs=1e-9), system
    if ranker == "fused":
        assert report["teacher"]["nDCG@10"] == pytest.approx(metrics["teacher"]["nDCG@10"], abs=1e-9)
    assert json.loads((tmp_path / "metrics.json").read_text())["deployment"]["ranker"] == ranker


def test_the_python_api_reranks_with_the_deployed_ranker(fits: dict[str, Path]) -> None:
    run_directory = fits["fused"]
    collection = Collection(CollectionConfig(**CRANFIELD))
    fused, first_stage = (read_run(run_directory / name) for name in ("runs/test.fused.run", "first_stage.trec"))
    reranker = Reranker.from_pretrained(str(run_directory / "model"))
    assert reranker.ranker == "fused"
    texts = {qid: {doc: collection.documents.text(doc) for doc in docs} for qid, docs in fused.items()}
    run = reranker.rerank_many(collection.queries, texts, {qid: {doc: first_stage[qid][doc] for doc in docs}
                                                           for qid, docs in fused.items()})
    qrels = {qid: collection.qrels[qid] for qid in fused}
    metrics = json.loads((run_directory / "metrics.json").read_text())["fused"]
    assert round(evaluate(run, qrels, ["nDCG@10"]).mean["nDCG@10"], 4) == round(metrics["nDCG@10"], 4)
    assert max(abs(run[q][d] - s) for q, docs in fused.items() for d, s in docs.items()) <= 1e-3
    qid = sorted(fused)[0]
    documents = list(texts[qid].values())
    scores = [first_stage[qid][doc] for doc in texts[qid]]
    ranked_api = reranker.rerank(collection.queries[qid], documents, first_stage_scores=scores)
    assert [list(texts[qid])[index] for index, _ in ranked_api] == [doc for doc, _ in ranked(run[qid])]
    with pytest.raises(ValueError, match=r"deploys fused .* pass first_stage_scores .* ranker='reranker'"):
        reranker.rerank(collection.queries[qid], documents)
    with pytest.raises(ValueError, match="no first-stage score for 1 candidate"):
        reranker.rerank(collection.queries[qid], documents, first_stage_scores=scores[:-1])
    pure = Reranker.from_pretrained(str(run_directory / "model"), ranker="reranker")
    assert pure.ranker == "reranker"
    expected = read_run(run_directory / "runs" / "test.run")[qid]
    np.testing.assert_allclose(pure.score(collection.queries[qid], documents), [expected[d] for d in texts[qid]],
                               atol=1e-4)


def test_the_summary_shows_the_figures_of_metrics_json(fits: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    fit.main(["--config", str(fits["auto"].parent / "auto.yaml"), "--output_dir", str(tmp_path / "again")])
    printed = capsys.readouterr().out
    metrics = json.loads((tmp_path / "again" / "metrics.json").read_text())
    deployed = metrics["deployment"]["ranker"]
    for system, name in ROWS:
        row = next(line for line in printed.splitlines() if re.match(rf"[│|] {re.escape(name)} +[│|]", line))
        cells = [cell.strip() for cell in re.split("[│|]", row)[1:-1]]
        assert cells[2] == f"{metrics[system]['nDCG@10']:.4f}", system
        assert (cells[4] == "<- deployed") == (system == deployed), system
        validation = metrics["deployment"]["validation"].get(system)
        assert cells[3] == ("" if validation is None else f"{validation:.4f}"), system
    assert f"deployed: {deployed}" in printed
    assert f"model: {tmp_path / 'again' / 'model'}" in printed and "rerank predict --config" in printed
    figures = {ranker: metrics["deployment"]["validation"][ranker] for ranker in ("reranker", "interpolated", "fused")}
    fused_weights = {name: metrics["fused"][f"w_{name}"] for name in TEACHER_ALONE}
    assert fused_weights == metrics["deployment"]["weights"] or deployed != "fused"  # the test row is the deployed
    if metrics["deployment"]["weights"] == TEACHER_ALONE:  # the chosen ranker did not beat the teacher alone
        assert figures["fused"] == pytest.approx(metrics["deployment"]["validation"]["teacher"], abs=1e-12)
        assert metrics["fused"]["nDCG@10"] == pytest.approx(metrics["teacher"]["nDCG@10"], abs=1e-12)
    else:
        assert deployed == choose(figures)  # the rule, on the figures the run wrote
    fine_tuned, zero_shot = figures["reranker"], max(metrics["deployment"]["validation"][name]
                                                     for name in ("teacher", "first_stage"))
    assert ("warning: the fine-tuned re-ranker is below" in printed) == (fine_tuned < zero_shot)
    assert "DataLoader 0" not in printed  # no raw Lightning table


@pytest.mark.parametrize("ranker", ["interpolated", "fused"])
def test_the_fit_calibrates_its_deployed_ranker_on_validation_and_predict_gives_its_probabilities(
        fits: dict[str, Path], tmp_path: Path, ranker: str) -> None:
    run_directory = fits[ranker]
    calibration = Calibration.from_dict(json.loads((run_directory / "model" / "config.json").read_text())["rerank"]
                                        ["calibration"])
    predicted(run_directory, tmp_path / "validation", "--data.predict_queries", "validation")
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    reference = fit_calibration(read_run(tmp_path / "validation" / "runs" / "reranked.run"), qrels)
    assert (reference.method, reference.fitted["pairs"]) == (calibration.method, calibration.fitted["pairs"])
    grid = np.linspace(-3, 3, 61)
    assert np.abs(reference.probabilities(grid) - calibration.probabilities(grid)).max() < 1e-3
    assert reference.threshold == pytest.approx(calibration.threshold, abs=1e-3)
    predicted(run_directory, tmp_path / "test")
    fitted = json.loads((run_directory / "metrics.json").read_text())["calibration"]
    again = json.loads((tmp_path / "test" / "metrics.json").read_text())["calibration"]
    assert again["pairs"] == fitted["pairs"] > 0
    for which in ("raw_sigmoid", "calibrated"):
        for measure in ("ece", "brier", "log_loss"):
            assert again[which][measure] == pytest.approx(fitted[which][measure], abs=1e-4), (which, measure)
    run = read_run(tmp_path / "test" / "runs" / "reranked.run")
    rows = [line.split("\t") for line in
            (tmp_path / "test" / "runs" / "reranked.probabilities.tsv").read_text().splitlines()]
    assert rows[0] == ["query_id", "doc_id", "rank", "score", "probability"] and len(rows) == 1 + sum(map(len,
                                                                                                       run.values()))
    for qid, doc, rank, score, probability in rows[1:]:
        assert ranked(run[qid])[int(rank) - 1] == (doc, float(score))  # the run's order and scores
        assert float(probability) == calibration.probabilities([float(score)])[0]
    summary = calibration_summary_lines(fitted)[0]  # what the fit's summary prints
    ece, raw = fitted["calibrated"]["ece"], fitted["raw_sigmoid"]["ece"]
    assert summary.startswith(f"calibrated: {calibration.method} on validation; on the {fitted['pairs']} test pairs "
                              f"ECE {ece:.4f} (the raw sigmoid's {raw:.4f})")
    assert (run_directory / "calibration.png").read_bytes()[:4] == b"\x89PNG"
    card = (run_directory / "model" / "README.md").read_text()
    assert "## Calibrated scores" in card
    assert f"| calibrated | {ece:.4f} | {fitted['calibrated']['brier']:.4f} |" in card


def test_an_export_from_before_deployments_is_the_pure_model(fits: dict[str, Path], tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(fits["fused"] / "model", model)
    config = json.loads((model / "config.json").read_text())
    del config["rerank"]["deployment"]  # what earlier releases wrote
    (model / "config.json").write_text(json.dumps(config))
    reranker = Reranker.from_pretrained(str(model))
    assert reranker.ranker == "reranker" and reranker.bi_encoder is None
    assert reranker.rerank("wind tunnel", ["a wind tunnel", "heat"])  # no first-stage scores needed
    run_directory = fits["fused"]
    predict.main(["--config", str(run_directory / "config.yaml"), "--model.model_name", str(model), "--run",
                  str(run_directory / "first_stage.trec"), "--data.predict_queries", "test", "--output_dir",
                  str(tmp_path / "out")])
    runs = tmp_path / "out" / "runs"
    assert (runs / "reranked.run").read_text().replace("rerank-reranker", "x") == (
        runs / "reranked.reranker.run").read_text().replace("rerank-model", "x")


@pytest.mark.parametrize("teacher", ["right", "wrong"])
def test_the_fit_deploys_the_teacher_alone_unless_the_choice_beats_it(teacher: str) -> None:
    """The fit's choice (rerank.ranker.selection.select) on hand-made validation runs: the re-ranker ranks every query's
    relevant document first. A teacher that does too is not beaten (every difference 0): the fusion is put on the
    teacher alone, with the teacher's figure. A teacher that ranks it last is beaten on every query: the re-ranker
    is kept."""
    from rerank.config.selection import SelectionRules
    from rerank.ranker.selection import ValidationRuns, select

    queries = [f"q{i}" for i in range(8)]
    qrels = {qid: {"d1": 1} for qid in queries}
    right, wrong = {"d1": 3.0, "d2": 2.0, "d3": 1.0}, {"d1": 1.0, "d2": 2.0, "d3": 3.0}
    runs = ValidationRuns({qid: dict(right) for qid in queries}, {qid: dict(wrong) for qid in queries},
                          {qid: dict(right if teacher == "right" else wrong) for qid in queries},
                          TeacherConfig(bi_encoder="some/bi-encoder"))
    teachers = evaluate(runs.teacher, qrels, ["nDCG@10"]).mean["nDCG@10"]
    chosen = select(runs, qrels, SelectionRules("nDCG@10", interpolate=True))  # the rule's pick: the re-ranker (a tie)
    deployment = chosen.deployment
    if teacher == "right":
        assert deployment.ranker == "fused" and deployment.weights == TEACHER_ALONE
        assert chosen.fusion_weights == (0.0, 1.0, 0.0) and deployment.validation["fused"] == teachers == 1.0
    else:
        assert teachers < 0.7 and deployment.ranker == "reranker" and chosen.fusion_weights == (1.0, 0.0, 0.0)
    # what the choice rests on: the 8 judged validation queries, and the difference they can tell, two standard
    # errors of the re-ranker's per-query difference to the teacher (0 here: the same difference on every query)
    assert deployment.queries == 8 and deployment.resolution == pytest.approx(0.0, abs=1e-12)
    assert Deployment.from_dict(deployment.as_dict(), "x") == deployment


def test_the_summary_says_when_the_teacher_alone_is_deployed_and_why() -> None:
    from rerank.cli.summary import rule

    figures = {"reranker": 0.3255, "interpolated": 0.3335, "fused": 0.3400, "teacher": 0.3400}
    alone = Deployment("fused", dict(TEACHER_ALONE), TeacherConfig(bi_encoder="b"), "nDCG@10", figures)
    assert rule(alone) == ("the teacher alone: no ranker beat it on validation by more than one standard error of "
                           "their per-query difference (nDCG@10 0.3400; re-ranker 0.3255; interpolated with the first "
                           "stage 0.3335)")
    mixed = Deployment("fused", {"reranker": 0.6, "teacher": 0.2, "first_stage": 0.2}, TeacherConfig(bi_encoder="b"),
                       "nDCG@10", figures)
    assert rule(mixed).startswith("the highest on validation, nDCG@10 0.3400 (against re-ranker 0.3255")


def test_a_choice_on_few_validation_queries_says_how_fine_it_is(tmp_path: Path) -> None:
    """The resolution is two standard errors of the per-query difference (scipy's, independently); below 30
    validation queries the fit warns, naming it, and the summary line says how many queries the choice rests on."""
    from scipy import stats

    from rerank.cli.summary import fit_summary
    from rerank.core.run_directory import RunDirectory
    from rerank.ranker.deployment import resolution

    rng = np.random.default_rng(3)
    ours, theirs = rng.random(15), rng.random(15)
    assert resolution(ours, theirs) == pytest.approx(2 * stats.sem(ours - theirs))
    assert resolution([0.5], [0.2]) is None
    few = Deployment(measure="nDCG@10", validation={"reranker": 0.41, "teacher": 0.40}, queries=15, resolution=0.083)
    assert ("the choices of this fit (the checkpoint, the deployed ranker) rest on 15 validation queries, which cannot "
            "tell the re-ranker from the teacher by less than 0.0830 nDCG@10: rerank cv measures every query of the "
            "collection") in few.warnings()
    assert not [line for line in Deployment(queries=45, resolution=0.04).warnings() if "rest on" in line]
    lines = fit_summary({"reranker": {"nDCG@10": 0.4}}, few, RunDirectory(tmp_path), "nDCG@10", 15)
    assert any(isinstance(line, str) and line.endswith(", on 15 validation queries") for line in lines)


def test_the_teachers_memory_gives_fresh_cosines_and_forgets_the_least_recently_used(tmp_path: Path) -> None:
    from rerank.ranker.memo import EmbeddingMemo, cosines_of_texts
    from rerank.teacher.scores import load_bi_encoder

    model = load_bi_encoder(str(tiny_bi_encoder(tmp_path)), 64, "cpu")
    queries = {"q1": "flow over a flat plate", "q2": "heat transfer at the wall"}
    texts = {f"d{i}": f"document {i} about {word}" for i, word in enumerate(["flow", "heat", "plates", "walls"])}
    first = {"q1": {d: texts[d] for d in ("d0", "d1", "d2")}, "q2": {d: texts[d] for d in ("d1", "d2")}}
    second = {"q1": {d: texts[d] for d in ("d2", "d3")}, "q2": {d: texts[d] for d in ("d0", "d3")}}
    memo = EmbeddingMemo(3)
    for candidates in (first, second, first):  # d0 is forgotten after the second call and embedded afresh
        assert cosines_of_texts(model, queries, candidates, memo=memo) == cosines_of_texts(model, queries, candidates)
    assert len(memo) == 3
    assert memo.get(texts["d3"]) is None and memo.get(texts["d0"]) is not None  # d3 was the least recently used


def test_a_fused_reranker_embeds_a_document_it_has_seen_from_memory_by_default(tmp_path: Path) -> None:
    """The Python API remembers the teacher's document embeddings by default: a second request over documents seen
    before embeds only its query, and scores what a reranker without memory scores."""
    from helpers import tiny_bert

    from rerank.model.cross_encoder import CrossEncoderModel
    from rerank.ranker.memo import REMEMBER

    teacher = TeacherConfig(bi_encoder=str(tiny_bi_encoder(tmp_path)), max_length=64)
    deployment = Deployment("fused", {"reranker": 0.5, "teacher": 0.3, "first_stage": 0.2}, teacher=teacher)
    model = CrossEncoderModel.from_pretrained(str(tiny_bert(tmp_path / "ce", with_head=True)))
    remembering, forgetting = Reranker(model, deployment, device="cpu"), Reranker(model, deployment, remember=0,
                                                                                  device="cpu")
    assert remembering.memo is not None and remembering.memo.size == REMEMBER and forgetting.memo is None
    documents, bm25 = ["flow over a flat plate", "heat transfer", "shock waves"], [3.0, 2.0, 1.0]
    encoded: list[int] = []
    encode = remembering.bi_encoder.encode
    remembering.bi_encoder.encode = lambda texts, **options: encoded.append(len(texts)) or encode(texts, **options)
    for query in ("boundary layers", "heat at the wall"):
        assert remembering.score(query, documents, bm25) == forgetting.score(query, documents, bm25)
    assert encoded == [3, 1, 1]  # the documents once, then each query alone


def test_the_teacher_alone_scores_as_its_fusion_does_without_running_the_cross_encoder(tmp_path: Path) -> None:
    from helpers import tiny_bert

    from rerank.model.cross_encoder import CrossEncoderModel
    from rerank.model.scorer import PairScorer
    from rerank.ranker.memo import cosines_of_texts
    from rerank.teacher.scores import blend

    teacher = TeacherConfig(bi_encoder=str(tiny_bi_encoder(tmp_path)), max_length=64, first_stage_weight=0.3)
    alone = Deployment("fused", dict(TEACHER_ALONE), teacher=teacher)
    model = CrossEncoderModel.from_pretrained(str(tiny_bert(tmp_path / "ce", with_head=True)))
    reranker = Reranker(model, alone, device="cpu")
    queries = {"q1": "boundary layers", "q2": "heat at the wall"}
    candidates = {"q1": {"a": "flow over a flat plate", "b": "heat transfer", "c": "shock waves"},
                  "q2": {"a": "flow over a flat plate", "d": "wall temperature"}}
    first_stage = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"a": 1.5, "d": 4.0}}
    pure = PairScorer(model, device="cpu").rerank_many(queries, candidates)
    cosines = blend(cosines_of_texts(reranker.bi_encoder, queries, candidates), first_stage, 0.3)
    calls: list[int] = []
    forward = model.forward
    model.forward = lambda *arguments, **options: calls.append(1) or forward(*arguments, **options)
    assert reranker.rerank_many(queries, candidates, first_stage) == alone.combine(pure, first_stage, cosines)
    assert not calls  # the cross-encoder weighs 0
