"""A smaller BERT from a bigger one: its first ``--layers`` layers (pretrained weights, the same tokenizer), for
runs whose point is the data's size, not the model's quality (docs/experiments/scale.md).

    python scripts/data/truncate_bert.py --model sentence-transformers/all-MiniLM-L6-v2 --layers 2 --out \
        models/minilm-l2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a BERT-like encoder: a Hugging Face name or folder")
    parser.add_argument("--layers", type=int, required=True, help="how many of its first layers to keep")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    args = parser.parse_args(argv)

    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(args.model)
    if not 1 <= args.layers <= model.config.num_hidden_layers:
        parser.error(f"--layers must lie in 1..{model.config.num_hidden_layers} for {args.model}; got {args.layers}")
    model.encoder.layer = model.encoder.layer[: args.layers]
    model.config.num_hidden_layers = args.layers
    model.save_pretrained(args.out)
    AutoTokenizer.from_pretrained(args.model).save_pretrained(args.out)
    print(f"{args.out}: the first {args.layers} layers of {args.model}")


if __name__ == "__main__":
    sys.exit(main())
