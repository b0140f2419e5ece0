"""Candidate lists as compact arrays (:mod:`rerank.data.candidates`): the same candidates, order and labels as the
run read as a dict and ranked, at a bounded number of bytes per candidate."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from rerank.data.candidates import CandidateLists, read_candidates
from rerank.data.trec import TrecFormatError, ranked, read_run


def _shuffled_run(path: Path, queries: int, depth: int, seed: int = 0) -> None:
    """A run file whose lines are in random order (queries interleaved), with tied scores and ids of any width."""
    rng = random.Random(seed)
    lines = [f"q{q} Q0 {'doc-' * rng.randint(0, 2)}{rng.randrange(10 * depth)}-{q}-{d} 0 {rng.randint(0, 5) / 4} t"
             for q in range(queries) for d in range(depth)]
    rng.shuffle(lines)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("layout", ["interleaved", "grouped", "ranked"])
def test_read_candidates_ranks_each_query_as_the_dict_run_does(tmp_path: Path, layout: str) -> None:
    path = tmp_path / "shuffled.run"
    _shuffled_run(path, queries=40, depth=30)
    if layout != "interleaved":  # each query's lines together, in random order or already ranked
        lines = sorted(path.read_text().splitlines(), key=lambda line: int(line.split()[0][1:]))
        if layout == "ranked":
            lines.sort(key=lambda line: (int(line.split()[0][1:]), -float(line.split()[4]), line.split()[2]))
        path.write_text("\n".join(lines) + "\n")
    reference = read_run(path)
    lists = read_candidates(path)
    assert lists.query_ids == list(reference)  # queries in the order of their first line
    for candidates in lists:
        expected = ranked(reference[candidates.query_id])  # score descending, ties by doc id ascending
        assert list(zip(candidates.doc_ids, candidates.scores.tolist())) == expected
    assert lists.as_run() == reference


def test_select_cuts_orders_and_labels_like_the_run(tmp_path: Path) -> None:
    path = tmp_path / "shuffled.run"
    _shuffled_run(path, queries=12, depth=20, seed=3)
    run = read_run(path)
    qrels = {qid: {doc: grade for doc, grade in zip(sorted(run[qid]), [2, -1, 1, 0, 3])} for qid in list(run)[:6]}
    queries = {qid: f"text of {qid}" for qid in run}
    wanted = ["q7", "absent", "q2", "q9", "q0"]
    chosen = read_candidates(path).select(wanted, 8, queries, qrels)
    assert chosen.query_ids == ["q7", "q2", "q9", "q0"] and chosen.queries == [queries[q] for q in chosen.query_ids]
    for candidates in chosen:
        top = ranked(run[candidates.query_id])[:8]
        assert candidates.doc_ids == [doc for doc, _ in top]
        judged = qrels.get(candidates.query_id, {})
        assert candidates.labels.tolist() == [max(judged.get(doc, 0), 0) for doc, _ in top]
    assert chosen.as_run() == CandidateLists.from_run(run, queries, qrels, wanted, 8).as_run()
    kept = chosen.keep([False, True, False, True])
    assert kept.query_ids == ["q2", "q0"] and kept[1].doc_ids == chosen[3].doc_ids
    scored = kept.with_teacher({qid: {doc: -score for doc, score in docs.items()} for qid, docs in run.items()})
    assert scored[0].teacher.tolist() == [-score for score in kept[0].scores.tolist()]


def test_a_duplicate_pair_anywhere_is_named_by_its_second_line(tmp_path: Path) -> None:
    path = tmp_path / "dup.run"
    lines = [f"1 Q0 d{d} {d} {1 - d / 1000} t" for d in range(500)] + ["2 Q0 d1 1 1 t", "1 Q0 d250 9 0.1 t"]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrecFormatError, match=r"dup.run:502: duplicate pair \(1, d250\): '1 Q0 d250 9 0.1 t'"):
        read_candidates(path)


def test_candidates_cost_a_few_bytes_each_not_python_objects(tmp_path: Path) -> None:
    """50,000 x 100 at scale; 400 x 100 here. Held as a dict a candidate costs over 100 bytes (the measured 131)."""
    path = tmp_path / "big.run"
    path.write_text("".join(f"{q} Q0 D{q * 1000 + d:07d} {d + 1} {100 - d / 10:.4f} t\n"
                            for q in range(400) for d in range(100)))
    candidates = 400 * 100
    tracemalloc.start()
    lists = read_candidates(path)
    compact = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    tracemalloc.start()
    run = read_run(path)
    as_dict = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert lists.ids.dtype == np.dtype("S8") and lists.as_run() == run
    assert compact / candidates < 20 < 100 < as_dict / candidates  # 8 bytes of id, 8 of score, 2 of label
