"""nDCG@10 against the length of the judgment-free stage: the learning curve of docs/experiments/README.md.

Each ``--curve`` is a label and ``STEPS=RUN`` points (a run over every query of the collection, e.g. a ``rerank cv``
directory's ``test.run``, or ``rerank predict`` of the stage alone); each ``--line`` a ``LABEL=RUN`` reference
drawn across (BM25, the teachers). nDCG@10 is the mean over the collection's judged queries (trec_eval)::

    python scripts/studies/ablation/plot_stage_curve.py --config cranfield.yaml --out \\
        docs/experiments/results/stage_curve.png \\
        --curve "fine-tuned on the folds" 1200=runs/ablation/default/test.run \\
            2400=runs/ablation/default-2400/test.run \\
        --curve "the stage alone" 1200=runs/stage-1200/runs/reranked.run 2400=runs/stage-2400/runs/reranked.run \\
        --line BM25=runs/ablation/default/first_stage.run --line "bi-encoder"=runs/ablation/bi-encoder/teacher.trec
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

from rerank import Collection, as_collection_config, config_settings, evaluate, read_run, save_figure

MEASURE = "nDCG@10"


def labelled(text: str) -> tuple[str, str]:
    label, separator, value = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"expected LABEL=RUN or STEPS=RUN; got {text!r}")
    return label, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a config whose data.collection holds the qrels")
    parser.add_argument("--out", required=True, type=Path, help="the PNG to write")
    parser.add_argument("--curve", nargs="+", action="append", required=True, metavar="LABEL STEPS=RUN",
                        help="a curve's label, then its points")
    parser.add_argument("--line", type=labelled, action="append", default=[], metavar="LABEL=RUN")
    arguments = parser.parse_args()
    section = config_settings(arguments.config)["data"]["collection"]
    qrels = Collection(as_collection_config(section, f"{arguments.config}: data.collection")).qrels

    def score(run: str) -> float:
        return evaluate(read_run(run), qrels, [MEASURE]).mean[MEASURE]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    at_step: dict[int, list[float]] = {}
    for label, *points in arguments.curve:
        steps, values = zip(*sorted((int(step), score(run)) for step, run in map(labelled, points)))
        axis.plot(steps, values, marker="o", label=label)
        for step, value in zip(steps, values):
            at_step.setdefault(step, []).append(value)
    for step, values in at_step.items():  # at each step, the highest value's label above its point, others below
        for value in values:
            axis.annotate(f"{value:.4f}", (step, value), textcoords="offset points", fontsize="small",
                          xytext=(4, 5 if value == max(values) else -12))
    drawn = [value for values in at_step.values() for value in values]
    for index, (label, run) in enumerate(arguments.line):
        drawn.append(score(run))
        axis.axhline(drawn[-1], linestyle="--", linewidth=1, color=f"C{index + len(arguments.curve)}",
                     label=f"{label} ({drawn[-1]:.4f})")
    padding = 0.08 * (max(drawn) - min(drawn))  # set by hand: the autoscale can leave a line on the frame
    axis.set_ylim(min(drawn) - padding, max(drawn) + padding)
    axis.set_xscale("log", base=2)
    axis.set_xticks(sorted(at_step), [str(step) for step in sorted(at_step)])
    axis.minorticks_off()
    axis.set(xlabel="steps of the judgment-free stage", ylabel=f"{MEASURE}, all queries",
             title="The student against its teachers, by the length of its stage")
    axis.legend(fontsize="small")
    print(save_figure(figure, arguments.out))


if __name__ == "__main__":
    main()
