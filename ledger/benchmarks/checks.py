"""Range checks on what a benchmark file says about each simulation and its run.

Both readers (τ² results.json, the ledger file) call these, so a value that
cannot be right or that the ledger cannot hold — a reward outside [0, 1], a
negative or astronomically large cost, a time that is not a time, a trial
number past the database's integers — is refused with one line naming the
file, the simulation and the field, before anything is written or imported.

Messages never quote the file's text: numbers are shown (they cannot hold a
credential), strings are not, and a task id is shown only when it looks like
one (a short run of letters, digits and . _ : / -)."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kernel.redact import SECRET_VALUES

# No simulation costs a million dollars: a larger figure is a unit or parsing
# error, and summed over a run it would overflow the ledger's nano-dollar totals.
MAX_COST_USD = 1_000_000.0
MAX_RUN_COST_USD = 1_000_000_000.0  # a run's total: the ledger's nano-dollar column holds up to ~$9.2e9
MAX_DURATION_S = 366 * 24 * 3600.0  # a year
MAX_INT = 2**31 - 1  # trials, trial counts, step limits: the database's integer columns
MAX_SEED = 2**63 - 1  # a 64-bit column

Fail = Callable[[str], Exception]

_SHOWABLE = re.compile(r"^[A-Za-z0-9._:/-]{1,64}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def simulation_name(n: int, task_id: Any = None, trial: Any = None, *, kind: str = "simulation") -> str:
    """`simulation 7 (task 12, trial 3)` (the 7th in the file), or just `simulation 7`
    when the task id is not showable. Ledger files say `item`."""
    task = str(task_id) if isinstance(task_id, (str, int)) and not isinstance(task_id, bool) else ""
    if not _SHOWABLE.match(task) or SECRET_VALUES.search(task):
        return f"{kind} {n}"
    trial_text = f", trial {_shown(trial)}" if isinstance(trial, int) and not isinstance(trial, bool) else ""
    return f"{kind} {n} (task {task}{trial_text})"


def number(fail: Fail, where: str, field: str, value: Any, *, low: float, high: float, what: str) -> float | None:
    """None stays None; otherwise a finite number within [low, high], or `fail`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"{where}: {field} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise fail(f"{where}: {field} is not a finite number")
    if not low <= value <= high:
        raise fail(f"{where}: {field} {_shown(value)} is not {what}")
    return float(value)


def reward(fail: Fail, where: str, field: str, value: Any) -> float | None:
    return number(fail, where, field, value, low=0.0, high=1.0, what="a reward between 0 and 1")


def cost(fail: Fail, where: str, field: str, value: Any) -> float | None:
    return number(
        fail, where, field, value, low=0.0, high=MAX_COST_USD, what=f"a cost in dollars (0 to {MAX_COST_USD:,.0f})"
    )


def duration(fail: Fail, where: str, field: str, value: Any) -> float | None:
    return number(fail, where, field, value, low=0.0, high=MAX_DURATION_S, what="a duration in seconds (0 to a year)")


def whole(fail: Fail, where: str, field: str, value: Any, *, low: int = 0, high: int = MAX_INT) -> int | None:
    """None stays None; otherwise a whole number within [low, high] (a float like 3.0 counts)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"{where}: {field} is not a whole number")
    if not low <= value <= high:
        raise fail(f"{where}: {field} {_shown(value)} is out of range ({low} to {high})")
    return value


def time(fail: Fail, where: str, field: str, value: Any) -> str | None:
    """None or empty stays None; otherwise an ISO 8601 date-time, kept as written."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise fail(f"{where}: {field} is not a time (an ISO 8601 string)")
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise fail(f"{where}: {field} is not an ISO 8601 date-time") from None
    return value


# --- Lenient reads: where a field is optional, a value of another type counts as absent.
def whole_or_none(value: Any) -> int | None:
    """An int (a float like 3.0 counts), else None; a bool is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def opening_hash(value: Any) -> str:
    """An opening hash (16 hex digits), or blank: anything else is not kept."""
    return value if isinstance(value, str) and _HEX16.match(value) else ""


def _shown(value: int | float) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    return text if len(text) <= 20 else f"{'-' if value < 0 else ''}1e{len(text.lstrip('-')) - 1}-ish"
