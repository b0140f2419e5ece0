"""The loss study (docs/experiments/loss-study.md): every head it compares trains inside the default recipe's two-term
loss (the qrels head plus the teacher's distillation), and ``scripts/studies/loss-study/loss_study.py`` runs end to end,
resumes, and reports, on a tiny model."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import MINILM_VOCAB, REPO, cranfield_workdir, load_script, script_path, tiny_bert, tiny_cv_config
from scipy import stats

from rerank.data.trec import read_run, restrict
from rerank.evaluation.measures import evaluate, paired_p
from rerank.training.batches import TrainingBatch
from rerank.training.lightning_module import RerankModule

STUDY = load_script("loss_study")
RECIPE = yaml.safe_load((REPO / "rerank" / "configs" / "recipes" / "default.yaml").read_text())["model"]


@pytest.mark.parametrize("head", STUDY.HEADS)
def test_each_head_lowers_the_recipes_two_term_loss(head: str, tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "rerank" / "configs" / "losses" / f"{head}.yaml").read_text())["model"]
    torch.manual_seed(0)
    module = RerankModule(str(tiny_bert(tmp_path / "bert", dropout=0.0)), loss=config["loss"],
                          loss_args=config["loss_args"], teacher_loss=RECIPE["teacher_loss"],
                          teacher_loss_args=RECIPE["teacher_loss_args"], teacher_weight=RECIPE["teacher_weight"])
    queries = ["wind tunnel", "heat flux"]
    documents = [["wind tunnel model", "heat flux", "aircraft", "similarity laws"],
                 ["heat flux laws", "wind", "query document", "heat flux to a model"]]
    inputs = module.model.pair_tokenizer()([q for q, docs in zip(queries, documents) for _ in docs],
                                           [doc for docs in documents for doc in docs])
    batch = TrainingBatch(inputs=inputs, labels=torch.tensor([[2, 0, 0, 1], [1, 0, 0, 2]]),
                          mask=torch.ones(2, 4, dtype=torch.bool), slots=torch.arange(8),
                          teacher=torch.tensor([[0.62, 0.31, 0.20, 0.45], [0.50, 0.22, 0.18, 0.66]]))
    optimizer = torch.optim.AdamW(module.parameters(), lr=3e-3)
    first = module.list_losses(batch)
    assert first["qrels"] > 0 and first["teacher"] > 0  # both terms take part
    for _ in range(30):
        optimizer.zero_grad()
        module.list_loss(batch).backward()
        optimizer.step()
    last = module.list_losses(batch)
    assert last["loss"] < first["loss"] and last["qrels"] < first["qrels"]


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared (MiniLM's vocabulary, Cranfield)")
def test_the_study_runs_every_head_resumes_and_reports_against_the_reference(tmp_path: Path) -> None:
    folder = cranfield_workdir(tmp_path / "work")
    config = tiny_cv_config(folder, teacher=folder / "bm25.run")
    config["evaluation"] = {"selection": {"measure": "nDCG@10", "interpolate": True}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "study"
    arguments = ["--out", str(out), "--heads", "listnet", "hinge", "--", "--config", str(folder / "config.yaml"),
                 "--folds", "1,2"]
    report = STUDY.main(arguments)
    assert set(report["heads"]) == {"listnet", "hinge"}
    qrels = STUDY.qrels_of(out, "listnet", [1, 2])
    assert report["queries"] == len(qrels) < 225  # the judged test queries of folds 1 and 2
    for name, system in (("pure", "test.run"), ("deployed", "test.deployed.run")):
        runs = {head: read_run(out / head / system) for head in ("listnet", "hinge")}
        ours, theirs = (evaluate(runs[head], qrels, ["nDCG@10"]) for head in ("hinge", "listnet"))
        hinge = report["heads"]["hinge"][name]
        assert hinge["nDCG@10"] == pytest.approx(ours.mean["nDCG@10"], abs=1e-12)
        assert hinge["p"] == pytest.approx(paired_p(ours.values("nDCG@10"), theirs.values("nDCG@10")))
        assert hinge["p_bonferroni"] == pytest.approx(min(1.0, hinge["p"]))  # one head compared
        differences = [a - b for a, b in zip(ours.values("nDCG@10"), theirs.values("nDCG@10"))]
        spread = statistics.stdev(differences) / len(differences) ** 0.5
        assert hinge["detectable"] == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * spread)
    # against BM25 on the same candidates (its scores of them), as rerank cv measures the first stage
    listnet = read_run(out / "listnet" / "test.run")
    bm25 = evaluate(restrict(read_run(folder / "bm25.run"), listnet), qrels, ["nDCG@10"]).mean["nDCG@10"]
    assert report["baselines"]["first_stage"]["nDCG@10"] == pytest.approx(bm25, abs=1e-12)
    assert report["heads"]["listnet"]["pure"]["first_stage"]["difference"] == pytest.approx(
        evaluate(listnet, qrels, ["nDCG@10"]).mean["nDCG@10"] - bm25, abs=1e-12)
    assert len(report["heads"]["hinge"]["validation"]) == 2 and (out / "folds.png").stat().st_size > 0
    assert json.loads((out / "report.json").read_text()) == report
    # a study cut short: a head whose cv stopped after fold 1 is compared with the reference on fold 1's queries
    shutil.copytree(out / "hinge" / "fold1", out / "lambdarank" / "fold1")
    shutil.copytree(out / "listnet" / "fold1", out / "smoothi_ndcg" / "fold1")
    cut_short = STUDY.report(out, ["listnet", "hinge", "lambdarank", "smoothi_ndcg"], "listnet")
    cut = cut_short["heads"]["lambdarank"]
    first = STUDY.qrels_of(out, "listnet", [1])
    assert cut["folds"] == [1] and cut["queries"] == len(first) < len(qrels)
    ours, theirs = (evaluate(read_run(out / head / "fold1" / "runs" / "test.run"), first, ["nDCG@10"])
                    for head in ("hinge", "listnet"))
    assert cut["pure"]["nDCG@10"] == pytest.approx(ours.mean["nDCG@10"], abs=1e-12)
    assert cut["pure"]["difference"] == pytest.approx(ours.mean["nDCG@10"] - theirs.mean["nDCG@10"], abs=1e-12)
    assert cut["validation_difference"] == pytest.approx(
        report["heads"]["hinge"]["validation"][0] - report["heads"]["listnet"]["validation"][0], abs=1e-12)
    # the seeds' claim: SmoothI-NDCG (here a copy of ListNet's fold 1) against hinge on nDCG@20, on fold 1
    smoothi, hinge = (evaluate(read_run(out / head / "fold1" / "runs" / "test.run"), first, ["nDCG@20"])
                      for head in ("listnet", "hinge"))
    claim = cut_short["seeds_claim"]
    assert claim["folds"] == [1] and claim["pure"]["difference"] == pytest.approx(
        smoothi.mean["nDCG@20"] - hinge.mean["nDCG@20"], abs=1e-12)
    assert claim["pure"]["low"] <= claim["pure"]["difference"] <= claim["pure"]["high"]
    shutil.rmtree(out / "lambdarank")
    shutil.rmtree(out / "smoothi_ndcg")
    # resumed: a head whose cv is done is not run again (its files untouched)
    before = (out / "hinge" / "cv_metrics.json").stat().st_mtime_ns
    again = subprocess.run([sys.executable, str(script_path("loss_study.py")), *arguments], capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "hinge: done before" in again.stdout and (out / "hinge" / "cv_metrics.json").stat().st_mtime_ns == before
