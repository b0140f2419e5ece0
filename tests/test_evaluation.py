"""rerank.evaluation against hand-computed trec_eval values."""

from __future__ import annotations

import logging
import math

import pytest

from rerank.evaluation import evaluate, trec_measure

QRELS = {"q1": {"d1": 2, "d2": 0, "d3": 1}, "q2": {"d4": 1}}
RUN = {"q1": {"d1": 0.1, "d2": 0.5, "d3": 0.3}}


@pytest.mark.parametrize(
    ("alias", "trec"),
    [("nDCG@10", "ndcg_cut.10"), ("P@20", "P.20"), ("MAP", "map"), ("MRR", "recip_rank"), ("R@100", "recall.100"),
     ("ndcg_cut.20", "ndcg_cut.20"), ("map", "map"), ("nDCG", "ndcg")],
)
def test_aliases_map_to_trec_eval_names(alias: str, trec: str) -> None:
    assert trec_measure(alias) == trec


def test_unknown_measure_is_rejected_with_the_name() -> None:
    with pytest.raises(ValueError, match="'nDCG@x'"):
        trec_measure("nDCG@x")


def test_values_match_hand_computation() -> None:
    result = evaluate(RUN, {"q1": QRELS["q1"]}, ["nDCG@10", "MAP", "MRR", "P.2", "ndcg_cut.10"])
    # ranking d2 (0), d3 (1), d1 (2); trec_eval's ndcg uses the relevance value as gain
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert result.mean["nDCG@10"] == pytest.approx(dcg / ideal)
    assert result.mean["ndcg_cut.10"] == pytest.approx(dcg / ideal)
    assert result.mean["MAP"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert result.mean["MRR"] == pytest.approx(1 / 2)
    assert result.mean["P.2"] == pytest.approx(1 / 2)


def test_missing_queries_count_as_zero_and_are_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    qrels = {**QRELS, "q-missing-once": {"d1": 1}}  # a set of missing queries no other test evaluates
    with caplog.at_level(logging.DEBUG, logger="rerank.evaluation"):
        result = evaluate(RUN, qrels, ["MRR"])
        evaluate(RUN, qrels, ["MAP"])  # the same queries again, as every epoch of a fit: said at debug level
        evaluate(RUN, {"q-missing-once": {"d1": 1}}, ["MRR"])  # other judged queries: said again
    assert result.missing == ["q-missing-once", "q2"]
    assert result.per_query["q2"]["MRR"] == 0.0
    assert result.mean["MRR"] == pytest.approx((0.5 + 0.0 + 0.0) / 3)
    said = [(record.levelno, record.getMessage()) for record in caplog.records if "absent" in record.getMessage()]
    twice = "2 of 3 judged queries are absent from the run and count as 0: q-missing-once, q2"
    assert said == [(logging.WARNING, twice), (logging.DEBUG, twice),
                    (logging.WARNING, "1 of 1 judged queries are absent from the run and count as 0: q-missing-once")]


def test_unjudged_queries_of_the_run_are_ignored() -> None:
    run = {**RUN, "q9": {"d1": 1.0}}
    assert evaluate(run, {"q1": QRELS["q1"]}, ["MAP"]).per_query.keys() == {"q1"}
