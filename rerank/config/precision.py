"""What a model scores in: the names of :data:`PRECISIONS`, which ``rerank serve``, ``Reranker`` and the teacher's
student take (the dtypes behind them are :data:`rerank.model.scorer.DTYPES`)."""

PRECISIONS = ("32", "bf16", "16", "bf16-true", "16-true")
"""``32``: float32; ``bf16`` and ``16``: autocast over float32 weights; ``bf16-true`` and ``16-true``: the weights
themselves cast (faster on a GPU, and what sentence-transformers does with ``model_kwargs={"dtype": ...}``)."""
SCORING = (*PRECISIONS, "int8")
"""What a trained model scores in (``Reranker``, ``rerank serve``, ``rerank predict``): :data:`PRECISIONS`, and ``int8``
(the linear layers' weights quantized to int8, on a CPU: :mod:`rerank.inference.fast_scoring`)."""
SCORING_CHOICES = (*SCORING, "auto")
""":data:`SCORING` and ``auto``: the fastest that passed the export's quality gate on this CPU."""
