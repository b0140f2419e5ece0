"""Position bias estimated from a log with swap interventions, without knowing the click model.

Joachims, Swaminathan and Schnabel, *Unbiased Learning-to-Rank with Biased Feedback*, WSDM 2017, Section 5: under
the position-based model a result at rank ``k`` is clicked with probability ``p_k * r`` (``p_k`` the examination
propensity, ``r`` the result's relevance). When each page swaps its top result (the ranking's first) with the one at
a uniformly drawn rank ``k`` (``rerank clicks --clicks.swap true``), the same top results are shown at rank ``k`` as
often as at rank 1, so the relevance cancels in the ratio of their click-through rates::

    p_k / p_1 = CTR(top result shown at rank k) / CTR(top result shown at rank 1)

:func:`estimate_propensities` gives these ratios (``p_1 = 1``), the propensities that inverse propensity scoring
divides clicks by, with their standard errors (the delta method over the two binomial rates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .log import Impression


@dataclass(frozen=True)
class PropensityEstimate:
    """Relative propensities ``p_k / p_1`` for ranks ``1..depth`` and what they come from.

    Attributes:
        propensities: ``[depth]`` the estimates (1 at rank 1; NaN at a rank where the top result was never shown).
        errors: ``[depth]`` their standard errors.
        shown: ``[depth]`` how often the ranking's top result was shown at each rank.
        clicks: ``[depth]`` how often it was clicked there.
    """

    propensities: np.ndarray
    errors: np.ndarray
    shown: np.ndarray
    clicks: np.ndarray


def estimate_propensities(impressions: Iterable[Impression], top: Mapping[str, str],
                          depth: int) -> PropensityEstimate:
    """``p_k / p_1`` from swap-intervention impressions (the module docstring).

    Args:
        impressions: the log (pages with swaps).
        top: each query's top result in the ranking before the swaps (impressions of other queries are skipped).
        depth: ranks ``1..depth`` are estimated.

    Raises:
        ValueError: the top results were never clicked at rank 1 (nothing to divide by).
    """
    shown = np.zeros(depth, dtype=np.int64)
    clicks = np.zeros(depth, dtype=np.int64)
    for impression in impressions:
        first = top.get(impression.query_id)
        if first is None or first not in impression.shown:
            continue
        rank = impression.shown.index(first) + 1
        if rank <= depth:
            shown[rank - 1] += 1
            clicks[rank - 1] += rank in impression.clicks
    if clicks[0] == 0:
        raise ValueError("the rankings' top results were never clicked at rank 1: a log with swap interventions "
                         "(rerank clicks --clicks.swap true) and more impressions are needed")
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = clicks / shown
        propensities = rates / rates[0]
        relative_variance = (1 - rates) / np.maximum(clicks, 1) + (1 - rates[0]) / clicks[0]
        errors = propensities * np.sqrt(relative_variance)
    errors[0] = 0.0
    return PropensityEstimate(propensities, errors, shown, clicks)
