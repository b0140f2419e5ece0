"""Click logs and the click simulator: click rates per rank and grade against each click model's closed form,
determinism, the query frequencies, and malformed logs named by file and line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import CRANFIELD

from rerank.cli import clicks
from rerank.cli import interleave as interleave_command
from rerank.clicks.interleaving import interleave, team_draft
from rerank.clicks.log import ClickLogError, Impression, read_click_log, write_click_log
from rerank.clicks.models import ClickModelConfig, sample_clicks
from rerank.clicks.propensity import estimate_propensities
from rerank.clicks.simulator import ClickSimulationConfig, query_frequencies, simulate
from rerank.data.candidates import CandidateLists
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.folds import FoldsConfig, make_split
from rerank.data.trec import ranked, read_run, write_run

GRADES = np.array([0, 2, 1, 0, 2, 0, 1, 0])  # one page of 8 results; the highest grade is 2
PAGES = 200_000


def _attractiveness(grade: int, noise: float = 0.1, top: float = 1.0, max_grade: int = 2) -> float:
    return noise + (top - noise) * (2**grade - 1) / (2**max_grade - 1)


def _expected(model: str, eta: float = 1.0, gamma: float = 0.9) -> np.ndarray:
    """P(click at each rank), written out from the models' definitions."""
    a = [_attractiveness(g) for g in GRADES]
    if model == "pbm":
        return np.array([(1 / (k + 1)) ** eta * a[k] for k in range(len(a))])
    expected, examined = [], 1.0
    for k, grade in enumerate(GRADES):
        expected.append(examined * a[k])
        if model == "cascade":
            examined *= 1 - a[k]  # stops at the first click
        else:
            satisfied = (2**grade - 1) / 3
            examined *= gamma * (1 - a[k] * satisfied)
    return np.array(expected)


@pytest.mark.parametrize(("model", "eta"), [("pbm", 0.5), ("pbm", 2.0), ("cascade", 1.0), ("dbn", 1.0)])
def test_click_rates_per_rank_and_grade_match_the_click_model(model: str, eta: float) -> None:
    config = ClickModelConfig(model=model, eta=eta)
    clicks = sample_clicks(np.tile(GRADES, (PAGES, 1)), 2, config, np.random.default_rng(7))
    expected = _expected(model, eta)
    error = np.sqrt(expected * (1 - expected) / PAGES)
    assert np.all(np.abs(clicks.mean(axis=0) - expected) <= 4 * error + 1e-12), (clicks.mean(axis=0), expected)
    if model == "cascade":
        assert clicks.sum(axis=1).max() == 1  # never a second click


def test_pages_with_fewer_results_get_no_click_beyond_them() -> None:
    grades = np.array([[2, 2, -1, -1], [2, -1, -1, -1]])
    for model in ("pbm", "cascade", "dbn"):
        clicks = sample_clicks(np.repeat(grades, 1000, axis=0), 2, ClickModelConfig(model=model, noise=1.0),
                               np.random.default_rng(0))
        assert not clicks[:, 2:].any() and not clicks[1000:, 1].any()


def _ranking(queries: int = 30, depth: int = 12) -> tuple[CandidateLists, dict[str, dict[str, int]]]:
    run = {f"q{q}": {f"d{q}-{d}": float(depth - d) for d in range(depth)} for q in range(queries)}
    qrels = {f"q{q}": {f"d{q}-{d}": (d + q) % 3 for d in range(0, depth, 2)} for q in range(queries)}
    return CandidateLists.from_run(run), qrels


def test_the_simulator_is_deterministic_and_shows_each_query_s_top(tmp_path: Path) -> None:
    ranking, qrels = _ranking()
    config = ClickSimulationConfig(impressions=5000, depth=10, seed=3,
                                   click_model=ClickModelConfig(model="dbn"))
    first = list(simulate(ranking, qrels, config))
    assert first == list(simulate(ranking, qrels, config))
    assert first != list(simulate(ranking, qrels, ClickSimulationConfig(impressions=5000, depth=10, seed=4)))
    assert len(first) == 5000
    for impression in first[:200]:
        assert impression.shown == tuple(f"d{impression.query_id[1:]}-{d}" for d in range(10))
    assert write_click_log(first, tmp_path / "log.jsonl") == 5000
    assert list(read_click_log(tmp_path / "log.jsonl", queries=set(ranking.query_ids))) == first


def test_queries_are_drawn_with_zipf_frequencies() -> None:
    ranking, qrels = _ranking(queries=50)
    impressions = list(simulate(ranking, qrels, ClickSimulationConfig(impressions=100_000, zipf=1.0, seed=1)))
    counts = sorted((sum(1 for i in impressions if i.query_id == qid) for qid in ranking.query_ids), reverse=True)
    expected = query_frequencies(50, 1.0) * 100_000
    assert counts[0] == pytest.approx(expected[0], rel=0.05) and counts[9] == pytest.approx(expected[9], rel=0.1)
    assert query_frequencies(4, 0.0).tolist() == [0.25] * 4


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ('{"query_id": "q1", "shown": ["a", "b"], "clicks": [3]}', r"a click at rank 3, which was not shown"),
        ('{"query_id": "q9", "shown": ["a"], "clicks": []}', r"unknown query id 'q9'"),
        ('{"query_id": "q1", "shown": ["a", "zz"], "clicks": []}', r"unknown doc id 'zz'"),
        ('{"query_id": "q1", "shown": ["a"], "clicks": [0]}', r"a click at rank 0"),
        ('{"query_id": "q1", "shown": ["a", "a"], "clicks": []}', r"shown lists a document twice: 'a'"),
        ('{"query_id": "q1", "shown": ["a b"], "clicks": []}', r"doc_id 'a b' is empty or holds whitespace"),
        ('{"query_id": "q1", "shown": ["a"]}', r"missing clicks"),
        ('{"query_id": "q1", "shown": ["a"], "clicks": [], "user": 3}', r"unknown field\(s\) user"),
        ('{"query_id": "q1", "shown": ["a"], "clicks": [1, 1]}', r"ascending ranks without repeats"),
        ('{"query_id": "q1", "shown": ["a"], "clicks": [], "time": "noon"}', r"time must be a number"),
        ('{"query_id": "q1", "shown": ["a"], "clicks": [1]', r"not JSON"),
    ],
)
def test_a_bad_impression_is_named_by_file_and_line(tmp_path: Path, record: str, message: str) -> None:
    good = json.dumps({"query_id": "q1", "shown": ["a", "b"], "clicks": [1], "session": "s", "time": 3})
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join([good] * 1000 + ["", record]) + "\n")
    with pytest.raises(ClickLogError, match=message) as error:
        list(read_click_log(path, queries={"q1"}, known_document={"a", "b"}.__contains__))
    assert str(error.value).startswith(f"{path}:1002: ")


def test_log_round_trip_keeps_sessions_and_times(tmp_path: Path) -> None:
    impressions = [Impression("q1", ("a", "b"), (2,), "s1", 10.5), Impression("q2", ("c",), ())]
    write_click_log(impressions, tmp_path / "log.jsonl")
    assert list(read_click_log(tmp_path / "log.jsonl")) == impressions


@pytest.mark.parametrize(("options", "message"), [
    ({"model": "ubm"}, "clicks.model must be one of pbm, cascade, dbn"),
    ({"noise": 0.5, "top": 0.2}, "0 <= noise <= top <= 1"),
    ({"eta": -1}, "clicks.eta must be >= 0"),
])
def test_bad_click_model_options_are_named(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClickModelConfig(**options)


def test_the_clicks_command_writes_a_log_of_the_training_folds_and_its_rates(tmp_path: Path) -> None:
    options = ["--config", "cranfield.yaml", "--data.first_stage.backend", "bm25s",
               "--data.first_stage.index_dir", str(tmp_path / "index"), "--clicks.impressions", "4000",
               "--clicks.click_model.eta", "2", "--clicks.seed", "5"]
    summary = clicks.main([*options, "--output_dir", str(tmp_path / "a")])
    clicks.main([*options, "--output_dir", str(tmp_path / "b")])
    log = (tmp_path / "a" / "clicks.jsonl").read_bytes()
    assert log == (tmp_path / "b" / "clicks.jsonl").read_bytes()  # the same options and seed, the same log
    collection = Collection(CollectionConfig(**CRANFIELD))
    train = set(make_split(FoldsConfig(scheme="kfold", count=5, seed=42, test=1), collection.qrels).train)
    impressions = list(read_click_log(tmp_path / "a" / "clicks.jsonl"))
    assert len(impressions) == summary["impressions"] == 4000 and {i.query_id for i in impressions} <= train
    run = read_run(tmp_path / "a" / "first_stage.trec")
    for impression in impressions[:100]:  # BM25's top 10, best first
        assert impression.shown == tuple(doc for doc, _ in ranked(run[impression.query_id])[:10])
    first = sum(1 in i.clicks for i in impressions) / len(impressions)
    assert summary["ctr_per_rank"]["1"] == pytest.approx(first, abs=1e-6)
    assert summary["ctr_per_rank"]["1"] > summary["ctr_per_rank"]["10"]
    assert json.loads((tmp_path / "a" / "clicks.json").read_text())["settings"]["click_model"]["eta"] == 2.0


@pytest.mark.parametrize("eta", [0.5, 2.0])
def test_swap_interventions_recover_the_position_bias(eta: float) -> None:
    ranking, qrels = _ranking(queries=40)
    config = ClickSimulationConfig(impressions=400_000, depth=10, swap=True, seed=2,
                                   click_model=ClickModelConfig(model="pbm", eta=eta))
    top = {candidates.query_id: candidates.doc_id(0) for candidates in ranking}
    estimate = estimate_propensities(simulate(ranking, qrels, config), top, depth=10)
    true = np.arange(1, 11, dtype=np.float64) ** -eta
    assert estimate.shown.min() > 35_000  # each rank holds about a tenth of the pages' top results
    assert np.all(np.abs(estimate.propensities - true) <= 4 * estimate.errors + 1e-12)
    assert np.all(np.abs(estimate.propensities[:5] / true[:5] - 1) < 0.1)


def test_a_swapped_page_exchanges_the_top_result_with_one_other() -> None:
    ranking, qrels = _ranking(queries=5)
    pages = list(simulate(ranking, qrels, ClickSimulationConfig(impressions=2000, swap=True, seed=1)))
    ranks = []
    for impression in pages:
        original = tuple(ranking[ranking.position(impression.query_id)].doc_ids[:10])
        moved = [k for k in range(10) if impression.shown[k] != original[k]]
        assert moved == [] or (len(moved) == 2 and moved[0] == 0)  # the top result and one other, exchanged
        ranks.append(moved[-1] + 1 if moved else 1)
    assert set(ranks) == set(range(1, 11))  # every rank drawn, rank 1 meaning no swap
    with pytest.raises(ValueError, match="never clicked at rank 1"):
        estimate_propensities(pages[:0], {}, depth=10)


class _Coin:
    """A random.Random stand-in whose ``random()`` returns the given values in turn."""

    def __init__(self, values: list[float]) -> None:
        self.values = iter(values)

    def random(self) -> float:
        return next(self.values)


def test_team_draft_takes_turns_and_skips_documents_already_shown() -> None:
    a, b = ["d1", "d2", "d3", "d4"], ["d2", "d3", "d1", "d5"]
    # coin < 0.5: A picks first in a tied round; the rounds: tie -> A (d1), B (d2), tie -> B (d3), A (d4)
    shown, teams = team_draft(a, b, depth=4, rng=_Coin([0.2, 0.7]))
    assert shown == ["d1", "d2", "d3", "d4"] and teams == [0, 1, 1, 0]
    # B (d2), A (d1), tie -> B (d3), A (d4), tie -> A, which has nothing left: the page ends (Radlinski et al.)
    shown, teams = team_draft(a, b, depth=5, rng=_Coin([0.7, 0.7, 0.2]))
    assert shown == ["d2", "d1", "d3", "d4"] and teams == [1, 0, 1, 0]
    same, teams = team_draft(a, a, depth=4, rng=random.Random(0))  # a ranking against itself: its own order
    assert same == a and all(abs(teams[: k].count(0) - teams[: k].count(1)) <= 1 for k in range(5))


def test_interleaving_a_run_with_itself_ties_and_with_its_reverse_prefers_the_better() -> None:
    queries = 40
    run = {f"q{q}": {f"d{q}-{d}": float(20 - d) for d in range(20)} for q in range(queries)}
    qrels = {f"q{q}": {f"d{q}-{d}": max(0, 3 - d // 2) for d in range(20)} for q in range(queries)}
    good = CandidateLists.from_run(run)
    reverse = CandidateLists.from_run({qid: {doc: -score for doc, score in docs.items()} for qid, docs in run.items()})
    config = ClickSimulationConfig(impressions=20_000, seed=4, click_model=ClickModelConfig(model="pbm", eta=1.0))
    itself = interleave(good, good, qrels, config)
    wins, losses, ties = itself.totals()
    assert wins + losses + ties == 20_000 and itself.impression_p_value() > 0.01
    assert abs(itself.preference) < 3 * 0.5 / np.sqrt(20_000)
    better = interleave(good, reverse, qrels, config)
    assert better.preference > 0.3 and better.impression_p_value() < 1e-10
    for_a, for_b, p_queries = better.query_p_value()
    assert for_a == queries and for_b == 0 and p_queries < 1e-10
    worse = interleave(reverse, good, qrels, config).summary()
    assert worse["preference"] < -0.3 and worse["queries_for_b"] == queries
    with pytest.raises(ValueError, match="share no query"):
        interleave(good, CandidateLists.from_run({"x": {"d": 1.0}}), qrels, config)


def test_the_interleave_command_prefers_bm25_to_its_reverse(tmp_path: Path) -> None:
    options = ["--config", "cranfield.yaml", "--data.first_stage.backend", "bm25s",
               "--data.first_stage.index_dir", str(tmp_path / "index"), "--clicks.impressions", "200"]
    clicks.main([*options, "--output_dir", str(tmp_path / "bm25")])  # writes BM25's run, first_stage.trec
    run = read_run(tmp_path / "bm25" / "first_stage.trec")
    top = {qid: dict(ranked(docs)[:10]) for qid, docs in run.items()}
    write_run({qid: {doc: -score for doc, score in docs.items()} for qid, docs in top.items()}, tmp_path / "rev.run")
    bm25, reverse = str(tmp_path / "bm25" / "first_stage.trec"), str(tmp_path / "rev.run")
    result = interleave_command.main(["--config", "cranfield.yaml", "--run_a", bm25, "--run_b", reverse,
                                      "--clicks.impressions", "5000", "--output_dir", str(tmp_path / "il")])
    assert result["preference"] > 0.01 and result["p_impressions"] < 1e-4 and result["impressions"] == 5000
    written = json.loads((tmp_path / "il" / "interleaving.json").read_text())
    assert written["wins"] == result["wins"] and sum(sum(t) for t in written["per_query"].values()) == 5000
