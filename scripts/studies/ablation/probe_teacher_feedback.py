"""Would pseudo-relevance feedback make a stronger judgment-free teacher? A zero-shot probe
(docs/experiments/README.md).

The teacher of the default recipe is the ensemble ``(1 - w) z(bi-encoder) + w z(first stage)``. Vector
pseudo-relevance feedback (Rocchio, 1971; for dense retrievers: Li et al., *Pseudo Relevance Feedback with Deep
Language Models and Dense Retrievers: Successes and Pitfalls*, TOIS 2023) moves each query's embedding towards the
mean embedding of the top ``k`` documents of a first ranking ``F``, and scores the candidates again::

    q' = (1 - beta) q + beta / k * sum_{d in top_k(F)} d,    score(q, d) = cos(q', d)

For each feedback ranking ``F`` (the bi-encoder, the ensemble, the first stage), ``k`` and ``beta`` of the grid,
it prints nDCG@10 of the feedback bi-encoder alone and mixed with the first stage as the ensemble is (weight
``w``), beside the first stage, the bi-encoder and the ensemble. It reads no judgments but to evaluate, so it may
be run on the tuning collections (SciFact, NFCorpus) to choose, and on others only to report. Judged queries
without candidates count as 0, as in ``rerank teacher``.

    HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 python scripts/studies/ablation/probe_teacher_feedback.py \\
        --config scifact.yaml \\
        --run runs/tune/scifact/first_stage.trec

Options are parsed as by every rerank command (``--config`` names the collection, ``--data.collection.*``).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping

import torch
from lightning.pytorch.cli import LightningArgumentParser
from rich.console import Console
from rich.table import Table

from rerank import (
    DEFAULT_BI_ENCODER,
    Collection,
    Run,
    as_collection_config,
    bi_encoder_embeddings,
    blend,
    configure_logging,
    cosines,
    evaluate,
    from_config,
    read_run,
    top_k,
)

MEASURE = "nDCG@10"


def rocchio(query: torch.Tensor, feedback: list[torch.Tensor], beta: float) -> torch.Tensor:
    """``(1 - beta) q + beta * mean(feedback)``, normalised (the equation of the module docstring)."""
    moved = (1 - beta) * query + beta * torch.stack(feedback).mean(0)
    return moved / moved.norm()


def feedback_scores(by_query: Mapping[str, torch.Tensor], by_doc: Mapping[str, torch.Tensor], candidates: Run,
                    ranking: Run, depth: int, beta: float) -> Run:
    """Each candidate's cosine with its query moved towards the top ``depth`` documents of ``ranking``."""
    tops = {qid: sorted(ranking[qid], key=ranking[qid].get, reverse=True)[:depth] for qid in candidates}
    moved = {qid: rocchio(by_query[qid], [by_doc[doc] for doc in top], beta) for qid, top in tops.items()}
    return cosines(moved, by_doc, candidates)


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--run", type=str, required=True, help="the first-stage TREC run")
    parser.add_argument("--depth", type=int, default=30, help="candidates per query (data.rerank_depth)")
    parser.add_argument("--bi_encoder", type=str, default=DEFAULT_BI_ENCODER)
    parser.add_argument("--max_length", type=int, default=256, help="as teacher.max_length")
    parser.add_argument("--first_stage_weight", type=float, default=0.4, help="w of the ensemble teacher")
    parser.add_argument("--feedback_depths", type=list[int], default=[3, 5, 10])
    parser.add_argument("--feedback_weights", type=list[float], default=[0.3, 0.5, 0.7])


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    cli = from_config(sys.argv[1:] if argv is None else argv, instantiate=False, options=_arguments,
                      prog="probe_teacher_feedback.py", description=__doc__.splitlines()[0])
    args = cli.config
    if min(args.feedback_depths, default=0) < 1 or not all(0 < beta <= 1 for beta in args.feedback_weights):
        raise ValueError(f"--feedback_depths must be positive and --feedback_weights in (0, 1]; got "
                         f"{args.feedback_depths} and {args.feedback_weights}")
    collection = Collection(as_collection_config(cli.option("data.collection"), "data.collection"))
    qrels = collection.qrels
    candidates = {qid: docs for qid, docs in top_k(read_run(args.run, queries=collection.queries),
                                                   args.depth).items() if qid in qrels}
    by_query, by_doc = bi_encoder_embeddings(candidates, collection.queries, collection.documents, args.bi_encoder,
                                             args.max_length)
    bi = cosines(by_query, by_doc, candidates)
    ensemble = blend(bi, candidates, args.first_stage_weight)

    answered = {qid: qrels[qid] for qid in candidates}

    def score(run: Run) -> str:  # the mean over every judged query, those without candidates counting as 0
        return f"{evaluate(run, answered, [MEASURE]).mean[MEASURE] * len(answered) / len(qrels):.4f}"

    table = Table(title=f"{collection.name}: {MEASURE} over the {len(qrels)} judged queries ({len(candidates)} with "
                        f"candidates, the others count as 0), top {args.depth} of "
                        f"{args.run}; first stage {score(candidates)}, bi-encoder {score(bi)}, ensemble (w = "
                        f"{args.first_stage_weight}) {score(ensemble)}")
    for column in ("feedback from", "k", "beta", "feedback bi-encoder", "mixed with the first stage"):
        table.add_column(column, justify="left" if column == "feedback from" else "right")
    rankings = {"bi-encoder": bi, "ensemble": ensemble, "first stage": candidates}
    for (name, ranking), depth, beta in itertools.product(rankings.items(), args.feedback_depths,
                                                          args.feedback_weights):
        moved = feedback_scores(by_query, by_doc, candidates, ranking, depth, beta)
        table.add_row(name, str(depth), str(beta), score(moved),
                      score(blend(moved, candidates, args.first_stage_weight)))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
