"""Team-draft interleaving: which of two rankers do simulated users prefer?

Radlinski, Kurup and Joachims. *How Does Clickthrough Data Reflect Retrieval Quality?* CIKM 2008. For each
impression, rankers A and B take turns, like captains picking teams (the one with fewer picks goes next, a coin
decides ties), each adding its highest-ranked document not yet shown, until the page holds ``depth`` results. A
click credits the team of the document clicked; the impression goes to the ranker with more clicked documents,
or is a tie. Clicks come from a click model over the qrels (:mod:`rerank.clicks.models`), for queries drawn with
Zipf-like frequencies (:mod:`rerank.clicks.simulator`).

The outcome (:class:`Outcome`): wins, losses and ties per query, the preference ``(wins + ties / 2) / impressions
- 1/2`` (positive: A preferred; Chapelle et al., TOIS 2012), and two sign tests: over the impressions with a
winner, and over the queries with a preference (the stricter one: impressions of one query are not independent
evidence about the rankers).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ..data.candidates import CandidateLists
from .models import sample_clicks
from .simulator import BLOCK, ClickSimulationConfig, query_frequencies


def team_draft(a: Sequence[str], b: Sequence[str], depth: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """One interleaved page of ``a`` and ``b`` (each best first): the documents, and the team of each (0: A, 1: B).

    Stops at ``depth`` results or when a ranker whose turn it is has no document left to add.
    """
    shown: list[str] = []
    teams: list[int] = []
    taken: set[str] = set()
    picks = [0, 0]
    cursors = [0, 0]
    rankings = (a, b)
    while len(shown) < depth:
        team = 0 if picks[0] < picks[1] or (picks[0] == picks[1] and rng.random() < 0.5) else 1
        ranking = rankings[team]
        while cursors[team] < len(ranking) and ranking[cursors[team]] in taken:
            cursors[team] += 1
        if cursors[team] == len(ranking):
            break
        document = ranking[cursors[team]]
        shown.append(document)
        teams.append(team)
        taken.add(document)
        picks[team] += 1
    return shown, teams


@dataclass
class Outcome:
    """Interleaving wins of A over B.

    Attributes:
        wins, losses, ties: per query id, impressions A won, lost, tied (no click, or as many on each team).
    """

    wins: dict[str, int] = field(default_factory=dict)
    losses: dict[str, int] = field(default_factory=dict)
    ties: dict[str, int] = field(default_factory=dict)

    def totals(self) -> tuple[int, int, int]:
        return sum(self.wins.values()), sum(self.losses.values()), sum(self.ties.values())

    @property
    def preference(self) -> float:
        """``(wins + ties / 2) / impressions - 1/2``: positive when A is preferred."""
        wins, losses, ties = self.totals()
        return (wins + ties / 2) / max(wins + losses + ties, 1) - 0.5

    def impression_p_value(self) -> float:
        """Two-sided sign test over the impressions with a winner."""
        wins, losses, _ = self.totals()
        return stats.binomtest(wins, wins + losses).pvalue if wins + losses else 1.0

    def query_p_value(self) -> tuple[int, int, float]:
        """Queries preferring A, queries preferring B, and the two-sided sign test over them."""
        queries = set(self.wins) | set(self.losses)
        for_a = sum(self.wins.get(q, 0) > self.losses.get(q, 0) for q in queries)
        for_b = sum(self.wins.get(q, 0) < self.losses.get(q, 0) for q in queries)
        return for_a, for_b, stats.binomtest(for_a, for_a + for_b).pvalue if for_a + for_b else 1.0

    def summary(self) -> dict[str, float | int]:
        wins, losses, ties = self.totals()
        for_a, for_b, query_p = self.query_p_value()
        return {"impressions": wins + losses + ties, "wins": wins, "losses": losses, "ties": ties,
                "preference": round(self.preference, 6), "p_impressions": self.impression_p_value(),
                "queries_for_a": for_a, "queries_for_b": for_b, "p_queries": query_p}


def interleave(a: CandidateLists, b: CandidateLists, qrels: Mapping[str, Mapping[str, int]],
               config: ClickSimulationConfig) -> Outcome:
    """Team-draft interleave ``a`` and ``b`` for ``config.impressions`` pages of their common queries, clicked by
    ``config.click_model`` over ``qrels``.

    Raises:
        ValueError: the rankings share no query.
    """
    common = [qid for qid in a.query_ids if b.position(qid) is not None]
    if not common:
        raise ValueError("the two rankings share no query")
    max_grade = max((grade for judged in qrels.values() for grade in judged.values()), default=1)
    ranked_a = {qid: a[a.position(qid)].doc_ids[: config.depth] for qid in common}
    ranked_b = {qid: b[b.position(qid)].doc_ids[: config.depth] for qid in common}
    rng = np.random.default_rng(config.seed)
    coin = random.Random(config.seed)
    order = rng.permutation(len(common))
    drawn = order[rng.choice(len(common), size=config.impressions, p=query_frequencies(len(common), config.zipf))]
    outcome = Outcome()
    for start in range(0, config.impressions, BLOCK):
        queries = [common[index] for index in drawn[start: start + BLOCK].tolist()]
        pages = [team_draft(ranked_a[qid], ranked_b[qid], config.depth, coin) for qid in queries]
        grades = np.full((len(pages), config.depth), -1, dtype=np.int64)
        for row, (qid, (shown, _)) in enumerate(zip(queries, pages)):
            judged = qrels.get(qid, {})
            grades[row, : len(shown)] = [max(judged.get(doc, 0), 0) for doc in shown]
        clicks = sample_clicks(grades, max_grade, config.click_model, rng)
        for qid, (_, teams), clicked in zip(queries, pages, clicks):
            credit = np.bincount(np.asarray(teams)[clicked[: len(teams)]], minlength=2)
            tally = outcome.wins if credit[0] > credit[1] else outcome.losses if credit[1] > credit[0] else outcome.ties
            tally[qid] = tally.get(qid, 0) + 1
    return outcome
