"""The choice of the deployed ranker (rerank.ranker.selection.select) against brute force over the weights and the rule
written out by hand, on runs made up here."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rerank.config.selection import SelectionRules
from rerank.config.teacher import TeacherConfig
from rerank.evaluation.fusion import DEFAULT_GRID, fuse, interpolate, simplex
from rerank.evaluation.measures import evaluate
from rerank.ranker.deployment import TEACHER_ALONE, beats_teacher
from rerank.ranker.selection import CROSS_FIT_PARTS, ValidationRuns, chosen_epoch, cross_fitted, select

BI_ENCODER = TeacherConfig(bi_encoder="sentence-transformers/all-MiniLM-L6-v2", first_stage_weight=0.4)


def made_up(queries: int, seed: int, teacher_skill: float) -> tuple[ValidationRuns, dict[str, dict[str, int]]]:
    """Runs over 8 candidates a query: a noisy re-ranker, a first stage, and a teacher ``teacher_skill`` good."""
    generator = random.Random(seed)
    qrels, reranker, first_stage, teacher = {}, {}, {}, {}
    for q in range(queries):
        qid = f"q{q}"
        gains = {f"d{d}": generator.choice([0, 0, 0, 1, 2]) for d in range(8)}
        qrels[qid] = gains
        reranker[qid] = {doc: gain + generator.gauss(0, 1.5) for doc, gain in gains.items()}
        first_stage[qid] = {doc: gain + generator.gauss(0, 2.0) for doc, gain in gains.items()}
        teacher[qid] = {doc: teacher_skill * gain + generator.gauss(0, 1.0) for doc, gain in gains.items()}
    return ValidationRuns(reranker, first_stage, teacher, BI_ENCODER), qrels


def mean(run: dict, qrels: dict, measure: str = "nDCG@10") -> float:
    return evaluate(run, qrels, [measure]).mean[measure]


@pytest.mark.parametrize("teacher_skill", [0.3, 3.0])
def test_the_weights_are_the_best_of_brute_force_and_the_rule_falls_back_to_the_teacher(teacher_skill: float) -> None:
    runs, qrels = made_up(40, 7, teacher_skill)
    chosen = select(runs, qrels, SelectionRules("nDCG@10", interpolate=True))
    interpolations = {w: mean(interpolate(runs.reranker, runs.first_stage, w), qrels) for w in DEFAULT_GRID}
    assert chosen.figures["interpolated"] == max(interpolations.values())
    assert chosen.interpolation_weight == max(w for w, v in interpolations.items() if v == max(interpolations.values()))
    fusions = {w: mean(fuse([runs.reranker, runs.teacher, runs.first_stage], w), qrels) for w in simplex(3)}
    best = max(fusions.values())
    assert max(fusions, key=lambda w: (fusions[w], w)) in (chosen.fusion_weights, (0.0, 1.0, 0.0))
    by_hand = max(("reranker", "interpolated", "fused"),
                  key=lambda r: ({"reranker": mean(runs.reranker, qrels), "interpolated": max(interpolations.values()),
                                  "fused": best}[r], -("reranker", "interpolated", "fused").index(r)))
    deployed = chosen.deployment.combine(runs.reranker, runs.first_stage, runs.teacher)
    alone = fuse([runs.reranker, runs.teacher, runs.first_stage], tuple(TEACHER_ALONE.values()))
    ours = evaluate(fuse([runs.reranker, runs.teacher, runs.first_stage],
                         max(fusions, key=lambda w: (fusions[w], w))) if by_hand == "fused" else
                    interpolate(runs.reranker, runs.first_stage, chosen.interpolation_weight)
                    if by_hand == "interpolated" else runs.reranker, qrels, ["nDCG@10"]).values("nDCG@10")
    if beats_teacher(ours, evaluate(alone, qrels, ["nDCG@10"]).values("nDCG@10")):
        assert chosen.deployment.ranker == by_hand
    else:  # the teacher alone, and the fusion's figure is the teacher's
        assert (chosen.deployment.ranker, chosen.fusion_weights) == ("fused", (0.0, 1.0, 0.0))
        assert chosen.figures["fused"] == pytest.approx(mean(runs.teacher, qrels), abs=1e-12)
    assert np.isclose(mean(deployed, qrels), chosen.figures[chosen.deployment.ranker], atol=1e-12)
    assert chosen.deployment.queries == 40 and chosen.deployment.teacher == (
        BI_ENCODER if chosen.deployment.ranker == "fused" else None)


def test_a_strong_teacher_is_deployed_alone_and_a_forced_ranker_is_kept() -> None:
    runs, qrels = made_up(40, 3, 5.0)
    assert select(runs, qrels, SelectionRules("nDCG@10", interpolate=True)).deployment.weights == TEACHER_ALONE
    forced = select(runs, qrels, SelectionRules("nDCG@10", interpolate=True, deploy="reranker"))
    assert forced.deployment.ranker == "reranker" and forced.fusion_weights != (0.0, 1.0, 0.0)


def test_a_teacher_that_cannot_score_new_queries_is_not_deployed() -> None:
    runs, qrels = made_up(30, 5, 5.0)
    fixed = ValidationRuns(runs.reranker, runs.first_stage, runs.teacher, TeacherConfig(run="teacher.run"))
    chosen = select(fixed, qrels, SelectionRules("nDCG@10", interpolate=True))
    assert chosen.deployment.ranker != "fused" and "fixed TREC run" in chosen.deployment.excluded["fused"]
    with pytest.raises(ValueError, match="evaluation.selection.deploy fused: its teacher is a fixed TREC run"):
        select(fixed, qrels, SelectionRules("nDCG@10", interpolate=True, deploy="fused"))
    plain = select(ValidationRuns(runs.reranker, runs.first_stage), qrels, SelectionRules("nDCG@10"))
    assert (plain.deployment.ranker, plain.interpolation_weight, plain.fusion_weights) == ("reranker", None, None)
    assert set(plain.figures) == {"reranker", "first_stage"}


def brute_force_choice(runs: ValidationRuns, qrels: dict) -> dict:
    """The run of the ranker the search picks on ``qrels``, by brute force: each fusion's best weights (ties to the
    larger first weights), then the best ranker (ties to the simpler)."""
    parts = [runs.reranker, runs.teacher, runs.first_stage]
    interpolations = {w: mean(interpolate(runs.reranker, runs.first_stage, w), qrels) for w in DEFAULT_GRID}
    fusions = {w: mean(fuse(parts, w), qrels) for w in simplex(3)}
    weight = max(interpolations, key=lambda w: (interpolations[w], w))
    weights = max(fusions, key=lambda w: (fusions[w], w))
    order = ("reranker", "interpolated", "fused")
    figures = {"reranker": mean(runs.reranker, qrels), "interpolated": interpolations[weight],
               "fused": fusions[weights]}
    best = max(order, key=lambda ranker: (figures[ranker], -order.index(ranker)))
    return {"reranker": runs.reranker, "interpolated": interpolate(runs.reranker, runs.first_stage, weight),
            "fused": fuse(parts, weights)}[best]


def test_the_cross_fitted_check_measures_each_part_on_the_choice_made_without_it() -> None:
    """check: cross_fit against the procedure written out by hand: the queries dealt into parts, each part measured
    on the brute-force choice of the other parts, the search's choice on all queries kept only if those values beat
    the teacher alone's by one standard error; both outcomes occur over these made-up collections."""
    outcomes = set()
    for queries, seed, skill in [(23, 0, 0.3), (23, 1, 1.0), (40, 2, 0.3), (40, 3, 3.0), (12, 4, 0.5), (3, 5, 1.0)]:
        runs, qrels = made_up(queries, seed, skill)
        order = sorted(qrels)
        random.Random(0).shuffle(order)
        count = min(CROSS_FIT_PARTS, queries)
        by_hand: dict[str, float] = {}
        for k in range(count):
            held_out = {qid: qrels[qid] for qid in order[k::count]}
            choice = brute_force_choice(runs, {qid: gains for qid, gains in qrels.items() if qid not in held_out})
            measured = evaluate(choice, held_out, ["nDCG@10"]).per_query
            by_hand |= {qid: values["nDCG@10"] for qid, values in measured.items()}
        rules = SelectionRules("nDCG@10", interpolate=True, check="cross_fit")
        out_of_sample = cross_fitted(runs, qrels, rules)
        assert out_of_sample == pytest.approx([by_hand[qid] for qid in sorted(by_hand)], abs=1e-12)
        chosen = select(runs, qrels, rules)
        alone = evaluate(fuse([runs.reranker, runs.teacher, runs.first_stage], tuple(TEACHER_ALONE.values())), qrels,
                         ["nDCG@10"]).values("nDCG@10")
        kept = beats_teacher(out_of_sample, alone)
        outcomes.add(kept)
        deployed = chosen.deployment.combine(runs.reranker, runs.first_stage, runs.teacher)
        if kept:  # the choice made on all the queries, as one_se would have it before its own check
            assert mean(deployed, qrels) == pytest.approx(mean(brute_force_choice(runs, qrels), qrels), abs=1e-12)
        else:
            assert chosen.deployment.weights == TEACHER_ALONE
    assert outcomes == {True, False}


@pytest.mark.parametrize(("gains", "one_se"), [
    ([0.3, 0.3, 0.0, 0.0], 0),  # ahead on two queries of four: mean 0.15 against a standard error of 0.087
    ([0.3, 0.0, 0.0, -0.02], 2),  # on one, a little behind on another: mean 0.07, a standard error of 0.077
    ([0.3, -0.2, 0.0, 0.0], 2),  # ahead on the mean (0.025), within its standard error (0.11)
    ([-0.1, 0.0, 0.0, 0.0], 2),  # behind
])
def test_the_chosen_epoch_is_the_last_unless_the_best_beats_it_by_one_standard_error(gains: list[float],
                                                                                    one_se: int) -> None:
    """Epochs 0 and 1 equal, epoch 2 the last: epoch 0 differs from it by ``gains``. ``best`` takes the highest mean,
    the first of equals; ``one_se`` the last unless mean(d) > sd(d) / sqrt(n), here by hand."""
    last = [0.5, 0.4, 0.6, 0.3]
    first = [value + gain for value, gain in zip(last, gains)]
    values = [first, first, last]
    assert chosen_epoch(values, "one_se") == one_se
    assert chosen_epoch(values, "best") == (0 if sum(gains) > 0 else 2)
    assert chosen_epoch([last, last], "best") == 0 and chosen_epoch([last, last], "one_se") == 1
    with pytest.raises(ValueError, match="rule 'worst'"):
        chosen_epoch(values, "worst")
    with pytest.raises(ValueError, match="evaluation.selection.epoch must be one of one_se, best; got 'worst'"):
        SelectionRules(epoch="worst")
