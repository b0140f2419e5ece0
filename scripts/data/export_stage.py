"""Export a cached judgment-free stage as a model folder, to score the stage alone with ``rerank predict``.

A stage's weights are cached as ``$RERANK_CACHE/pretrained/KEY.safetensors`` (:mod:`rerank.training.pretraining`); the
log of the run that trained or loaded it names the file ("pre-training stage, round 1 of 1: ..."). Since the stage
reads no judgments, its student can be scored on every query of the collection (docs/experiments/README.md,
"the stage alone")::

    python scripts/data/export_stage.py ~/.cache/rerank/pretrained/KEY.safetensors runs/stage-1200
    rerank predict --config cranfield.yaml --model.model_name runs/stage-1200 --data.rerank_depth 30 \\
        --data.predict_queries all --trainer.precision bf16-mixed --output_dir runs/stage-1200-predict

The base model and the tokenization must be those the stage was trained with (the defaults: the default recipe's).
"""

from __future__ import annotations

import argparse
import dataclasses

from safetensors.torch import load_file

from rerank import CrossEncoderModel, TokenizationConfig, export


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", help="the stage's cached weights (KEY.safetensors)")
    parser.add_argument("out", help="the model folder to write")
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2", help="the stage's base model")
    parser.add_argument("--max_length", type=int, default=192)
    parser.add_argument("--max_query_length", type=int, default=48)
    arguments = parser.parse_args()
    tokenization = TokenizationConfig(max_length=arguments.max_length, max_query_length=arguments.max_query_length)
    model = CrossEncoderModel.from_pretrained(arguments.model, tokenization=tokenization)
    model.load_state_dict(load_file(arguments.weights))  # raises on a stage of another base model
    card = {"model": {"model_name": arguments.model, "tokenization": dataclasses.asdict(tokenization)},
            "pretrain": {"weights": arguments.weights}}
    export(model, arguments.out, card)
    print(arguments.out)


if __name__ == "__main__":
    main()
