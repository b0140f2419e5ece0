"""Where a training source's teacher scores come from: :class:`TeacherConfig` (a source's ``teacher:`` in the YAML).
The scores themselves are :mod:`rerank.teacher.scores`'s."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.checks import check_range
from .precision import PRECISIONS


@dataclass(frozen=True)
class TeacherConfig:
    """Where a source's teacher scores come from: a TREC run, or a bi-encoder that scores the candidates.

    Attributes:
        run: a TREC run whose scores are the teacher's.
        bi_encoder: a sentence-transformers model (hub id in the local cache, or a folder).
        max_length: tokens per text for the bi-encoder.
        first_stage_weight: the first stage's share ``w`` in an ensemble teacher (0: the teacher alone).
        student: a cross-encoder folder whose scores are mixed in, after the first stage's (born-again).
        student_weight: the student's share in that mix.
        student_precision: what the student scores in (:data:`rerank.config.precision.PRECISIONS`).
    """

    run: str | None = None
    bi_encoder: str | None = None
    max_length: int = 256
    first_stage_weight: float = 0.0
    student: str | None = None
    student_weight: float = 0.5
    student_precision: str = "32"

    def __post_init__(self) -> None:
        if (self.run is None) == (self.bi_encoder is None):
            raise ValueError("teacher: give either run (a TREC run with scores) or bi_encoder (a sentence-transformers "
                             f"model), not {'both' if self.run else 'neither'}")
        check_range("teacher.max_length", self.max_length, 1)
        check_range("teacher.first_stage_weight", self.first_stage_weight, 0, below=1)  # 0: the teacher alone
        check_range("teacher.student_weight", self.student_weight, above=0, below=1)
        if self.student_precision not in PRECISIONS:
            raise ValueError(f"teacher.student_precision must be one of {', '.join(PRECISIONS)}; got "
                             f"{self.student_precision!r}")
