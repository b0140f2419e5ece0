"""The one range check of options, with the one message form: ``data.batch_size must be >= 1; got 0``; and
``AUTO``, the one spelling of an option that rerank sizes itself.

    >>> check_range("data.batch_size", 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: data.batch_size must be >= 1; got 0
    >>> check_range("teacher.first_stage_weight", 1.0, 0, below=1)
    Traceback (most recent call last):
    ...
    ValueError: teacher.first_stage_weight must be in [0, 1); got 1.0
"""

from __future__ import annotations

AUTO = "auto"
"""The value of an option that rerank sizes from the collection (rows, query budget, the stage's steps, the
pseudo-queries' words), resolved once before any work."""


def check_range(name: str, value: float, minimum: float | None = None, maximum: float | None = None, *,
                above: float | None = None, below: float | None = None) -> None:
    """Fail unless ``minimum <= value <= maximum`` and ``above < value < below`` (each bound when given).

    Raises:
        ValueError: ``{name} must be {the range}; got {value}``.
    """
    low = (minimum, "[") if minimum is not None else (above, "(") if above is not None else None
    high = (maximum, "]") if maximum is not None else (below, ")") if below is not None else None
    inside = ((minimum is None or value >= minimum) and (maximum is None or value <= maximum)
              and (above is None or value > above) and (below is None or value < below))
    if inside:
        return
    if low and high:
        condition = f"in {low[1]}{low[0]:g}, {high[0]:g}{high[1]}"
    elif low:
        condition = f"{'>=' if low[1] == '[' else '>'} {low[0]:g}"
    else:
        condition = f"{'<=' if high[1] == ']' else '<'} {high[0]:g}"
    raise ValueError(f"{name} must be {condition}; got {value!r}")
