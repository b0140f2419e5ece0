"""Shared test helpers."""

from __future__ import annotations

import torch


def random_lists(
    queries: int, length: int, grades: int = 3, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random scores and graded labels ``[queries, length]``; every list has at least two different labels."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(queries, length, generator=generator, dtype=dtype)
    labels = torch.randint(0, grades, (queries, length), generator=generator)
    labels[:, 0], labels[:, 1] = grades - 1, 0
    return scores, labels
