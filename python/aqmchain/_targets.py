"""Target sets of first-passage questions: ``queue>=200``, ``queue==0``, ``avg>=150 and modulator==1``.

A target is a conjunction of clauses ``QUANTITY OP NUMBER``. The quantities are the ones the
chain and the simulator both know at the start of a slot (after the slot's events in
continuous time):

- ``queue``: the packets in the system (waiting or in service), the chain's level n;
- ``avg``: the AQM's moving average (on the chain, the value of its grid point);
- ``modulator``: the traffic modulator's state index (0 for a source without one).

The chain (first-passage analysis) and the simulator (hitting times) read the same parsed
:class:`Target`, so the set is defined once here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import model_error

QUANTITIES: dict[str, str] = {
    "queue": "packets in the system (waiting or in service)",
    "avg": "the AQM's moving average",
    "modulator": "the traffic modulator's state index",
}
OPERATORS = (">=", "<=", "==", ">", "<")
_INTEGER_QUANTITIES = ("queue", "modulator")
_CLAUSE = re.compile(r"^\s*([A-Za-z_]+)\s*(>=|<=|==|>|<)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Clause:
    """One comparison ``quantity op value``."""

    quantity: str
    op: str
    value: float

    def holds(self, x: Any) -> np.ndarray:
        x = np.asarray(x)
        if self.op == ">=":
            return x >= self.value
        if self.op == "<=":
            return x <= self.value
        if self.op == ">":
            return x > self.value
        if self.op == "<":
            return x < self.value
        return x == self.value

    def __str__(self) -> str:
        v = int(self.value) if float(self.value).is_integer() else self.value
        return f"{self.quantity}{self.op}{v}"


@dataclass(frozen=True)
class Target:
    """A conjunction of clauses; ``str(target)`` is its canonical text."""

    clauses: tuple[Clause, ...]

    def holds(self, queue: Any, avg: Any = 0.0, modulator: Any = 0) -> np.ndarray:
        """Boolean mask of the states (arrays of the three quantities, broadcast) in the target set."""
        values = {"queue": queue, "avg": avg, "modulator": modulator}
        mask = np.ones(np.broadcast(*(np.asarray(v) for v in values.values())).shape, dtype=bool)
        for c in self.clauses:
            mask &= c.holds(values[c.quantity])
        return mask

    def quantities(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.quantity for c in self.clauses))

    def __str__(self) -> str:
        return " and ".join(str(c) for c in self.clauses)


def parse_target(text: Any, parameter: str = "to") -> Target:
    """Parse ``"queue>=200"``, ``"queue == 0"``, ``"avg>=150 and modulator==1"`` into a :class:`Target`.

    Errors name ``parameter`` (the option the user wrote), what is allowed and the value.
    """
    if isinstance(text, Target):
        return text
    if not isinstance(text, str) or not text.strip():
        raise model_error(parameter, "a target such as 'queue>=200' (clauses joined by 'and')", text)
    clauses = []
    for part in re.split(r"\s+and\s+|\s*&&?\s*", text.strip()):
        m = _CLAUSE.match(part)
        if not m:
            raise model_error(parameter, "clauses 'QUANTITY OP NUMBER' with QUANTITY in "
                              + ", ".join(QUANTITIES) + " and OP in " + " ".join(OPERATORS) + ", joined by 'and'",
                              text)
        quantity, op, number = m.groups()
        if quantity not in QUANTITIES:
            raise model_error(f"{parameter} ({part.strip()})", "a quantity in " + ", ".join(QUANTITIES), quantity)
        try:
            value = float(number)
        except ValueError:
            raise model_error(f"{parameter} ({part.strip()})", "a finite number", number) from None
        if not np.isfinite(value):
            raise model_error(f"{parameter} ({part.strip()})", "a finite number", number)
        if quantity in _INTEGER_QUANTITIES and not value.is_integer():
            raise model_error(f"{parameter} ({part.strip()})", f"a whole number ({quantity} is a count)", value)
        clauses.append(Clause(quantity, op, value))
    return Target(tuple(clauses))
