"""Random halvings of a fold's validation queries, shared by the split-half studies: each rule chooses on one half
and is measured on the other, both ways."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np


def halvings(count: int, times: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(pick, judge)``: the rows of ``count`` queries split in two at random, ``times`` times (from ``seed``), each
    halving given both ways."""
    generator = random.Random(seed)
    for _ in range(times):
        order = list(range(count))
        generator.shuffle(order)
        halves = np.array(order[: count // 2]), np.array(order[count // 2:])
        yield halves
        yield halves[::-1]
