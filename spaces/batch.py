"""Batch sizes (powers of two) and the rules that scale the LR with them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from spaces.errors import SpaceError, check_choice, check_int, check_positive


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return n >= 1 and n & (n - 1) == 0


def power_of_two_sizes(low: int, high: int, *, key: str = "batch_size") -> tuple[int, ...]:
    """The powers of two from ``low`` to ``high`` inclusive.

    Both bounds must be powers of two with ``1 <= low <= high``; ``key``
    prefixes the error keys (``"batch_size.low"``).
    """
    low = check_int(f"{key}.low", low, minimum=1)
    high = check_int(f"{key}.high", high, minimum=1)
    for bound, value in (("low", low), ("high", high)):
        if not is_power_of_two(value):
            below = 1 << (value.bit_length() - 1)
            raise SpaceError(
                f"{key}.{bound}",
                f"must be a power of two, got {value} (nearest: {below} or {below * 2})",
            )
    if low > high:
        raise SpaceError(f"{key}.low", f"must be <= high ({high}), got {low}")
    return tuple(1 << e for e in range(low.bit_length() - 1, high.bit_length()))


@dataclass(frozen=True)
class LRScaling:
    """Scale a learning rate tuned at ``base_batch_size`` to another batch size.

    Rules: ``"none"`` (lr unchanged), ``"linear"`` (lr * B / base, Goyal et al.
    2017), ``"sqrt"`` (lr * sqrt(B / base)).
    """

    rule: str = "none"
    base_batch_size: int = 32

    RULES: ClassVar[tuple[str, ...]] = ("none", "linear", "sqrt")

    def __post_init__(self) -> None:
        check_choice("lr_scaling.rule", self.rule, self.RULES)
        object.__setattr__(
            self,
            "base_batch_size",
            check_int("lr_scaling.base_batch_size", self.base_batch_size, minimum=1),
        )

    @classmethod
    def of_params(cls, params: Mapping[str, Any]) -> LRScaling:
        """The rule a trainer's parameters name (``lr_scaling``, ``base_batch_size``; the defaults when absent)."""
        return cls(str(params.get("lr_scaling", "none")), int(params.get("base_batch_size", 32)))

    def formula(self) -> str:
        """The rule written out, in the tuned ``lr`` and the batch size ``B``."""
        base = f"{self.base_batch_size:,}"
        return {"linear": f"lr × B / {base}", "sqrt": f"lr × sqrt(B / {base})"}.get(self.rule, "lr")

    def __call__(self, lr: float, batch_size: int) -> float:
        """The learning rate to use at ``batch_size``."""
        lr = check_positive("lr", lr)
        ratio = check_int("batch_size", batch_size, minimum=1) / self.base_batch_size
        if self.rule == "linear":
            return lr * ratio
        if self.rule == "sqrt":
            return lr * math.sqrt(ratio)
        return lr
