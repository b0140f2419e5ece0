"""rerank.evaluation.measures against hand-computed trec_eval values."""

from __future__ import annotations

import logging
import math
import random
import re

import pytest
import pytrec_eval

from rerank.evaluation.measures import evaluate, parse_measure

QRELS = {"q1": {"d1": 2, "d2": 0, "d3": 1}, "q2": {"d4": 1}}
RUN = {"q1": {"d1": 0.1, "d2": 0.5, "d3": 0.3}}


def test_unknown_measure_is_rejected_with_the_name() -> None:
    for name in ("nDCG@x", "ndcg_cut.10", "MRR@ten"):
        with pytest.raises(ValueError, match=f"unknown measure {re.escape(repr(name))}: use ir_measures' names"):
            parse_measure(name)


def test_values_match_hand_computation() -> None:
    result = evaluate(RUN, {"q1": QRELS["q1"]}, ["nDCG@10", "AP", "MAP", "RR", "RR@10", "P@2", "Judged@2"])
    # ranking d2 (0), d3 (1), d1 (2); trec_eval's ndcg uses the relevance value as gain
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert result.mean["nDCG@10"] == pytest.approx(dcg / ideal)
    assert result.mean["AP"] == result.mean["MAP"] == pytest.approx((1 / 2 + 2 / 3) / 2)  # ir_measures' alias
    assert result.mean["RR"] == result.mean["RR@10"] == pytest.approx(1 / 2)
    assert result.mean["P@2"] == pytest.approx(1 / 2)
    assert result.mean["Judged@2"] == 1.0


def test_the_figures_are_trec_evals_on_a_run_and_qrels_of_our_own() -> None:
    """ir_measures' names, computed through ir_measures, against trec_eval's own code (pytrec_eval) on the same run
    and qrels: graded labels, ties, queries without a relevant document, cut-offs beyond the list."""
    generator = random.Random(7)
    qrels = {f"q{q}": {f"d{d}": generator.choice([0, 0, 1, 2, 3]) for d in generator.sample(range(80), 20)}
             for q in range(30)}
    run = {qid: {f"d{d}": float(generator.randint(0, 9)) for d in generator.sample(range(80), 50)} for qid in qrels}
    names = {"nDCG@10": "ndcg_cut_10", "nDCG@20": "ndcg_cut_20", "AP": "map", "R@100": "recall_100", "P@10": "P_10",
             "RR": "recip_rank", "nDCG": "ndcg", "R@5": "recall_5"}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {name.rsplit("_", 1)[0] if name[-1].isdigit() else name
                                                      for name in names.values()}).evaluate(run)
    result = evaluate(run, qrels, list(names))
    for qid in qrels:
        for name, trec in names.items():
            assert result.per_query[qid][name] == pytest.approx(expected[qid][trec], abs=1e-12), (qid, name)
    judged = evaluate(run, qrels, ["Judged@10"]).per_query  # by hand: the share of the top 10 that is judged
    for qid, docs in run.items():
        top = sorted(docs, key=lambda doc: (-docs[doc], doc))[:10]
        assert judged[qid]["Judged@10"] == pytest.approx(sum(doc in qrels[qid] for doc in top) / 10)


def test_missing_queries_count_as_zero_and_are_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    qrels = {**QRELS, "q-missing-once": {"d1": 1}}  # a set of missing queries no other test evaluates
    with caplog.at_level(logging.DEBUG, logger="rerank.evaluation.measures"):
        result = evaluate(RUN, qrels, ["RR"])
        evaluate(RUN, qrels, ["AP"])  # the same queries again, as every epoch of a fit: said at debug level
        evaluate(RUN, {"q-missing-once": {"d1": 1}}, ["RR"])  # other judged queries: said again
    assert result.missing == ["q-missing-once", "q2"]
    assert result.per_query["q2"]["RR"] == 0.0
    assert result.mean["RR"] == pytest.approx((0.5 + 0.0 + 0.0) / 3)
    said = [(record.levelno, record.getMessage()) for record in caplog.records if "absent" in record.getMessage()]
    twice = "2 of 3 judged queries are absent from the run and count as 0: q-missing-once, q2"
    assert said == [(logging.WARNING, twice), (logging.DEBUG, twice),
                    (logging.WARNING, "1 of 1 judged queries are absent from the run and count as 0: q-missing-once")]


def test_unjudged_queries_of_the_run_are_ignored() -> None:
    run = {**RUN, "q9": {"d1": 1.0}}
    assert evaluate(run, {"q1": QRELS["q1"]}, ["MAP"]).per_query.keys() == {"q1"}
