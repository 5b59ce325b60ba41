"""Parse value grids such as "0.01:0.10:0.01,0.2:0.5:0.1" (inclusive ranges and single values)."""

from __future__ import annotations

import math

from sparsecse.errors import SparseCSEError

MAX_GRID_VALUES = 10_000


def parse_grid(text: str | float | list, what: str = "value") -> list[float]:
    """Sorted distinct values from comma-separated items, each a number or start:stop:step (inclusive)."""
    if isinstance(text, (int, float)):
        text = [text]
    if isinstance(text, (list, tuple)):
        text = ",".join(str(v) for v in text)
    values: set[float] = set()
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise SparseCSEError(f"The {what} grid is empty.")
    for item in items:
        parts = item.split(":")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            raise SparseCSEError(f"The {what} grid item {item!r} is not a number or start:stop:step.") from None
        if not all(math.isfinite(n) for n in numbers):
            raise SparseCSEError(f"The {what} grid item {item!r} holds a value that is not a finite number.")
        if len(numbers) == 1:  # as given: a rounded value would pass checks the given one fails
            values.add(numbers[0])
        elif len(numbers) == 3:
            start, stop, step = numbers
            if step <= 0 or stop < start:
                raise SparseCSEError(f"The {what} range {item!r} needs start <= stop and a positive step.")
            count = math.floor((stop - start) / step + 1e-9) + 1
            if count > MAX_GRID_VALUES:
                raise SparseCSEError(f"The {what} range {item!r} holds {count} values; the limit is {MAX_GRID_VALUES}.")
            # the range's ends exactly as given, the values between rounded (0.1 + 2 * 0.1 is 0.3)
            values.update(start if k == 0 else stop if abs(start + k * step - stop) <= 1e-9 * step
                          else round(start + k * step, 10) for k in range(count))
        else:
            raise SparseCSEError(f"The {what} grid item {item!r} is not a number or start:stop:step.")
    return sorted(values)


def check_sparsity(value: float) -> float:
    """``value`` if it lies strictly between 0 and 1."""
    if not 0.0 < value < 1.0:
        raise SparseCSEError(f"sparsity must lie strictly between 0 and 1; got {float(value)!r}.")
    return value
