"""Click models: how a simulated user examines a result page and clicks, given each result's relevance grade.

Every model clicks a result it examines with its *attractiveness*, a function of its grade ``g`` (negative and
unjudged grades count as 0) and of the collection's highest grade ``G`` (ULTRA's and Chuklin et al.'s setting)::

    attractiveness(g) = noise + (top - noise) * (2^g - 1) / (2^G - 1)

so an irrelevant result is still clicked with probability ``noise`` (click noise, default 0.1) and the best with
``top`` (default 1.0). They differ in which results are examined:

- ``pbm``, the position-based model (Joachims et al., WSDM 2017): the result at rank ``k`` (1-based) is examined
  with probability ``(1 / k) ^ eta``, independently of the others; ``eta`` sets the position bias (0.5 weak, 2
  strong). ``P(click at k) = (1 / k) ^ eta * attractiveness(g_k)``: ``(1 / k) ^ eta`` is the propensity that
  inverse propensity scoring divides by.
- ``cascade`` (Craswell et al., WSDM 2008): the user reads top-down and stops at the first click:
  ``P(click at k) = a_k * prod_{j < k} (1 - a_j)``.
- ``dbn``, the dynamic Bayesian network (Chapelle and Zhang, WWW 2009): top-down; a click satisfies the user with
  probability ``satisfaction(g) = (2^g - 1) / (2^G - 1)``, which ends the session; otherwise the user goes on to
  the next result with probability ``gamma`` (perseverance, default 0.9):
  ``P(E_1) = 1``, ``P(E_{k+1}) = gamma * P(E_k) * (1 - a_k * s_k)``, ``P(click at k) = P(E_k) * a_k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.checks import check_range

MODELS = ("pbm", "cascade", "dbn")


@dataclass
class ClickModelConfig:
    """A click model and its parameters (the module docstring gives the formulas).

    Attributes:
        model: ``pbm``, ``cascade`` or ``dbn``.
        eta: ``pbm``'s position bias: rank ``k`` is examined with probability ``(1 / k) ^ eta``.
        noise: the click probability of an examined irrelevant result.
        top: the click probability of an examined result of the highest grade.
        gamma: ``dbn``'s perseverance, the probability of going on after a result that did not satisfy.
    """

    model: str = "pbm"
    eta: float = 1.0
    noise: float = 0.1
    top: float = 1.0
    gamma: float = 0.9

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"clicks.model must be one of {', '.join(MODELS)}; got {self.model!r}")
        check_range("clicks.eta", self.eta, 0)
        if not 0 <= self.noise <= self.top <= 1:
            raise ValueError(f"clicks.noise and clicks.top must satisfy 0 <= noise <= top <= 1; got noise "
                             f"{self.noise}, top {self.top}")
        check_range("clicks.gamma", self.gamma, 0, 1)


def attractiveness(grades: np.ndarray, max_grade: int, config: ClickModelConfig) -> np.ndarray:
    """``noise + (top - noise) * (2^g - 1) / (2^G - 1)`` for each grade (negative grades count as 0)."""
    gain = (2.0 ** np.maximum(grades, 0) - 1) / (2.0 ** max(max_grade, 1) - 1)
    return config.noise + (config.top - config.noise) * gain


def examination(ranks: np.ndarray, eta: float) -> np.ndarray:
    """The position-based model's examination probability (its propensity) at 1-based ``ranks``."""
    return np.asarray(ranks, dtype=np.float64) ** -eta


def sample_clicks(grades: np.ndarray, max_grade: int, config: ClickModelConfig,
                  rng: np.random.Generator) -> np.ndarray:
    """Clicks ``[I, K]`` (bool) on ``I`` result pages of ``K`` slots; ``grades[i, k]`` is the grade of the result at
    rank ``k + 1`` of page ``i``, or -1 where the page shows fewer results (never clicked)."""
    shown = grades >= 0
    attractive = attractiveness(grades, max_grade, config)
    if config.model == "pbm":
        ranks = np.arange(1, grades.shape[1] + 1)
        return shown & (rng.random(grades.shape) < examination(ranks, config.eta) * attractive)
    satisfaction = (2.0 ** np.maximum(grades, 0) - 1) / (2.0 ** max(max_grade, 1) - 1)
    gamma = config.gamma if config.model == "dbn" else 1.0
    clicks = np.zeros(grades.shape, dtype=bool)
    examining = np.ones(grades.shape[0], dtype=bool)
    for k in range(grades.shape[1]):
        clicks[:, k] = examining & shown[:, k] & (rng.random(len(examining)) < attractive[:, k])
        done = clicks[:, k] if config.model == "cascade" else clicks[:, k] & (
            rng.random(len(examining)) < satisfaction[:, k])
        examining &= shown[:, k] & ~done & (rng.random(len(examining)) < gamma)
    return clicks
