"""The commands of ``rerank``, their one-line summaries and modules (torch-free: the dispatcher and the stored
schema read it before any command loads)."""

from __future__ import annotations

COMMANDS = {
    "fit": "train a re-ranker, test the weights chosen on validation, export them",
    "cv": "cross-validate: one fit per test fold, then the runs and metrics over all folds",
    "predict": "re-rank a run with a trained model, on one device or many",
    "serve": "serve a trained model's deployed ranker over HTTP (Cohere's and text-embeddings-inference's APIs)",
    "bm25": "the first-stage run of a collection and its metrics",
    "teacher": "score a collection's candidates with a teacher (a bi-encoder) for distillation",
    "compare": "compare runs with paired t-tests, as a markdown table and plots",
    "export": "export a checkpoint for transformers, sentence-transformers and ONNX",
    "clicks": "simulate a click log of a ranking with a click model over the qrels",
    "interleave": "compare two runs by team-draft interleaving with simulated clicks",
}
TRAINER = ("trainer.max_epochs", "trainer.precision", "trainer.devices", "trainer.accumulate_grad_batches",
           "trainer.logger")
"""The Trainer's options that the help of the commands that train shows (``--help-all``: all of Lightning's)."""
TRAINS = ("output_dir", "model.model_name", "model.loss", "model.loss_args", "model.teacher_loss",
          "model.teacher_weight", "model.tokenization", "model.optimizer", "data.collection", "data.first_stage",
          "data.folds", "data.train", "data.rerank_depth", "data.list_size", "data.strategy", "data.batch_size",
          "evaluation", "pretrain", *TRAINER)
"""What a command that trains reads of the shared config."""
READS = {
    "fit": (*TRAINS, "ckpt_path"),
    "cv": (*TRAINS, "folds"),
    "predict": ("output_dir", "run", "ranker", "untrained_head", "model.model_name", "model.tokenization", "data",
                "evaluation.metrics", "trainer.accelerator", "trainer.devices", "trainer.precision"),
    "bm25": ("output_dir", "data.collection", "data.first_stage", "evaluation.metrics"),
    "teacher": ("output_dir", "run", "teacher", "data.collection", "data.first_stage", "data.rerank_depth",
                "evaluation.metrics"),
    "compare": ("systems", "qrels", "alpha", "output", "data.collection"),
    "serve": ("serve", "ranker", "untrained_head", "model.model_name"),
    "clicks": ("output_dir", "run", "clicks", "data.collection", "data.first_stage", "data.folds"),
    "interleave": ("output_dir", "run_a", "run_b", "clicks", "data.collection", "data.folds"),
}
"""The options each command reads (and their sub-options), where it reads fewer than it accepts: ``--help`` shows
these; ``--help-all`` every option of the shared config, which every command accepts (the commands that train or
score, absent here, read them all)."""
HELP_ALL = "--help-all"
