"""Learning from clicks: click targets against the naive and IPS formulas written out, clipping, a training source
over a click log, and the errors of bad click options and logs."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import yaml
from helpers import CRANFIELD, MINILM_VOCAB, cranfield_workdir

from rerank.cli import fit
from rerank.clicks.log import ClickLogError, Impression, write_click_log
from rerank.clicks.simulator import ClickSimulationConfig, simulate
from rerank.clicks.targets import ClickTargetConfig, click_targets
from rerank.config.source import as_source_config
from rerank.data.candidates import read_candidates
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.folds import FoldsConfig, make_split
from rerank.first_stage import FirstStageConfig
from rerank.training.lists import TrainingLists
from rerank.training.sources import SourceContext, resolve

LOG = [
    Impression("1", ("a", "b", "c"), (2,)),
    Impression("1", ("b", "a", "c"), (1, 3)),
    Impression("1", ("a", "b", "c"), ()),
    Impression("2", ("d", "e"), (2,)),
]


def test_click_targets_are_the_naive_and_ips_estimates(tmp_path: Path) -> None:
    write_click_log(LOG, tmp_path / "log.jsonl")
    log = str(tmp_path / "log.jsonl")
    naive, ranks = click_targets(ClickTargetConfig(log=log, estimator="naive"))
    assert naive == {"1": {"a": 0.0, "b": 2 / 3, "c": 1 / 3}, "2": {"d": 0.0, "e": 1.0}}
    assert ranks == {"1": {"a": 1, "b": 2, "c": 3}, "2": {"d": 1, "e": 2}}  # where each was first shown
    ips = click_targets(ClickTargetConfig(log=log, eta=2.0)).targets  # p_k = 1/k^2: a click at rank k weighs k^2
    assert ips["1"] == pytest.approx({"a": 0.0, "b": (4 + 1) / 3, "c": 9 / 3})
    assert ips["2"] == pytest.approx({"d": 0.0, "e": 4.0})
    clipped = click_targets(ClickTargetConfig(log=log, eta=2.0, clip=0.2)).targets  # rank 3: 1/9 < 0.2, so it weighs 5
    assert clipped["1"]["c"] == pytest.approx(5 / 3)
    given = click_targets(ClickTargetConfig(log=log, propensities=[1.0, 0.5, 0.25])).targets
    assert given["1"] == pytest.approx({"a": 0.0, "b": (2 + 1) / 3, "c": 4 / 3})
    (tmp_path / "clicks.json").write_text(json.dumps({"propensities": {"estimated": [1.0, 0.5, 0.25]}}))
    assert click_targets(ClickTargetConfig(log=log, propensities=str(tmp_path / "clicks.json"))).targets == given
    with pytest.raises(ClickLogError, match=r"log.jsonl:2: query '1' shows 'b' at rank 1, earlier at rank 2: "
                                            "estimator dla needs each query's documents at one rank"):
        click_targets(ClickTargetConfig(log=log, estimator="dla"))  # the second impression swapped a and b


def test_ips_weights_are_one_over_the_clipped_propensity() -> None:
    weight = ClickTargetConfig(log="unused", eta=2.0, clip=0.05).propensity()
    for rank in range(1, 11):
        assert 1 / weight(rank) == pytest.approx(min(rank**2, 20))  # clipped at 1 / 0.05
    assert ClickTargetConfig(log="unused", estimator="naive").propensity()(7) == 1.0


@pytest.mark.parametrize(("options", "message"), [
    ({"estimator": "ips"}, "ips needs the propensities: clicks.eta .* not neither"),
    ({"eta": 1.0, "propensities": [1.0]}, "not both"),
    ({"propensities": [1.0, 0.0]}, r"clicks.propensities must all be > 0"),
    ({"estimator": "pbm"}, "clicks.estimator must be one of naive, ips, dla"),
    ({"eta": 1.0, "clip": 0}, r"clicks.clip must be in \(0, 1\]"),
])
def test_bad_click_options_are_named(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClickTargetConfig(log="log.jsonl", **options)


def test_bad_click_sources_and_logs_fail_before_training(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data.train\[0\]: targets clicks needs clicks"):
        as_source_config({"targets": "clicks"}, "data.train[0]")
    with pytest.raises(ValueError, match=r"data.train\[0\]: clicks.estimator ips needs the propensities"):
        as_source_config({"targets": "clicks", "clicks": {"log": "x"}}, "data.train[0]")
    write_click_log([*LOG, Impression("3", ("a",), (2,))], tmp_path / "log.jsonl")
    with pytest.raises(ClickLogError, match=r"log.jsonl:5: a click at rank 2, which was not shown"):
        click_targets(ClickTargetConfig(log=str(tmp_path / "log.jsonl"), estimator="naive"))
    with pytest.raises(ValueError, match="clicks.propensities gives 2 ranks; the log shows rank 3"):
        click_targets(ClickTargetConfig(log=str(tmp_path / "log.jsonl"), propensities=[1.0, 0.5]))


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
def test_a_click_source_learns_from_the_training_folds_clicks_only(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    workdir = cranfield_workdir(tmp_path)
    collection = Collection(CollectionConfig(**CRANFIELD))
    folds = FoldsConfig(scheme="kfold", count=5, seed=42, test=1)
    split = make_split(folds, collection.qrels)
    ranking = read_candidates(workdir / "bm25.run").select(sorted(collection.qrels), 10, collection.queries,
                                                          collection.qrels)
    log = tmp_path / "clicks.jsonl"  # every judged query's clicks, test queries' too: those must be left out
    write_click_log(simulate(ranking, collection.qrels, ClickSimulationConfig(impressions=20_000, seed=1)), log)
    context = SourceContext(collection=collection, first_stage=FirstStageConfig(backend="run", run=str(workdir)),
                            first_stage_run=None, train_query_ids=split.train, rerank_depth=20, strategy="random")
    config = as_source_config({"targets": "clicks", "clicks": {"log": str(log), "eta": 1.0}}, "data.train[0]")
    with caplog.at_level(logging.INFO):
        source = resolve(config, "data.train[0]", context)
    assert "queries outside this source's" in caplog.text
    targets, ranks = click_targets(config.clicks)
    assert set(source.lists.query_ids) <= set(split.train) and source.strategy == "sample"
    for candidates in source.lists:
        assert dict(zip(candidates.doc_ids, candidates.teacher.tolist())) == targets[candidates.query_id]
        assert all(not math.isnan(value) for value in candidates.teacher.tolist())
        # in the order the log showed them, its ranks as first-stage scores: BM25's top 10 of this query
        assert candidates.doc_ids == list(ranking[ranking.position(candidates.query_id)].doc_ids)
        assert (-candidates.scores).tolist() == [ranks[candidates.query_id][d] for d in candidates.doc_ids]
    item = TrainingLists([source], list_size=4, seed=0)[(0, 0, 0)]
    first = source.lists[0]
    positions = [first.doc_ids.index(doc) for doc in
                 [d for d in first.doc_ids if collection.documents.text(d) in item.documents]]
    assert item.teacher is None and item.clicks == [float(first.teacher[p]) for p in positions]
    assert item.ranks == [p + 1 for p in positions] and item.ranks == sorted(item.ranks)
    for clicks, click_loss in (({"log": str(log), "eta": 1.0}, "click_bce"), ({"log": str(log), "estimator": "dla"},
                                                                                "dla")):
        settings = {"model": {"model_name": str(workdir / "bert"), "loss": "listnet", "click_loss": click_loss,
                              "tokenization": {"max_length": 48, "max_query_length": 12}},
                    "data": {"collection": CRANFIELD,
                             "first_stage": {"backend": "run", "run": str(workdir / "bm25.run")},
                             "folds": folds.__dict__, "rerank_depth": 20, "list_size": 4, "batch_size": 2,
                             "train": [{"targets": "clicks", "clicks": clicks},  # beside a teacher (BM25's scores)
                                       {"targets": "teacher", "teacher": {"run": str(workdir / "bm25.run")}}]},
                    "trainer": {"max_epochs": 1, "limit_train_batches": 3, "limit_val_batches": 2,
                                "limit_test_batches": 1, "enable_progress_bar": False, "logger": False,
                                "num_sanity_val_steps": 0}}
        (tmp_path / "clicks.yaml").write_text(yaml.safe_dump(settings))
        with caplog.at_level(logging.INFO):
            metrics = fit.main(["--config", str(tmp_path / "clicks.yaml"), "--output_dir", str(tmp_path / click_loss)])
        assert 0 <= metrics["reranker"]["nDCG@10"] <= 1 and set(metrics) >= {"reranker", "first_stage"}
    assert "propensities learnt by model.click_loss, ranks 1 to 10" in caplog.text  # dla's, after the epoch
