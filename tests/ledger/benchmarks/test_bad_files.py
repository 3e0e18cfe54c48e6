"""Hostile and impossible benchmark files, through the real commands.

- No error message quotes the file: a non-UTF-8 byte or a stray character
  right after an `api_key` made the JSON parser's message (a bytes repr whose
  newline is a literal backslash-n) carry the key into the error line.
- A value the ledger cannot hold or that cannot be right (a cost of 1e300, a
  reward outside [0, 1], a negative cost, a time that is not a time) is
  refused: exit 2, one line naming the file, the simulation and the field, and
  nothing written or imported. tau2_convert used to write such a file, which
  then crashed benchmark_import."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from ledger.models import BenchmarkItem, BenchmarkRun
from tests.e2e.conftest import find_secrets
from tests.ledger.tau2files import FAKE_KEY, REAL_LOOKING_KEY
from tests.ledger.tau2files import results as fixture

ROOT = Path(__file__).resolve().parents[3]
COMMANDS = ["tau2_summary", "tau2_convert", "tau2_scrub", "import_tau2", "benchmark_import"]


def refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as caught:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    return caught.value


def command_args(command: str, path: Path) -> list[str]:
    if command == "import_tau2":
        return [command, str(path), "--target", "m"]
    if command == "benchmark_import":
        return [command, str(path), "--target", "m", "--target-kind", "model"]
    return [command, str(path)]


def key_pieces(text: str) -> list[str]:
    """Any 8-character piece of the key found in text."""
    return [REAL_LOOKING_KEY[i : i + 8] for i in range(len(REAL_LOOKING_KEY) - 7) if REAL_LOOKING_KEY[i : i + 8] in text]


# --- 2. errors never quote the file ---------------------------------------------------
BREAKS_AFTER_THE_KEY = {
    "non-utf8-byte": b"\xff",  # inside the key's string
    "stray-char": b'"\xff',  # right after it
    "bad-escape": b"\\q",
    "control-char": b"\x01",
    "missing-comma": b'" "x',
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", sorted(BREAKS_AFTER_THE_KEY))
def test_a_parse_error_next_to_a_key_does_not_quote_it(command, damage, tmp_path, db):
    text = fixture("airline-oracle").read_bytes()
    broken = text.replace(FAKE_KEY.encode(), REAL_LOOKING_KEY.encode() + BREAKS_AFTER_THE_KEY[damage], 1)
    if command == "benchmark_import":
        # The ledger file: the same damage next to a key a hand-edited ledger could hold.
        ledger = {"format": "marina-ledger", "version": 1, "run": {"agent": {"args": {"api_key": "KEY"}}}}
        broken = json.dumps(ledger).encode().replace(b"KEY", REAL_LOOKING_KEY.encode() + BREAKS_AFTER_THE_KEY[damage])
    path = tmp_path / "results.json"
    path.write_bytes(broken)
    error = refused(*command_args(command, path))
    message = str(error)
    assert error.returncode == 2
    assert message.startswith(f"{path}: ")
    assert key_pieces(message) == [] and not find_secrets(message)
    assert "\n" not in message and "\\n" not in message and "\\x" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # nothing written
    assert BenchmarkRun.objects.count() == 0


def test_through_manage_py_stderr_is_one_line_without_the_key(tmp_path):
    path = tmp_path / "results.json"
    path.write_bytes(fixture("airline-oracle").read_bytes().replace(FAKE_KEY.encode(), REAL_LOOKING_KEY.encode() + b"\xff", 1))

    def start(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", command, str(path)],
            cwd=ROOT, env={**os.environ, "DJANGO_SETTINGS_MODULE": "marina.settings"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    commands = ("tau2_summary", "tau2_convert", "tau2_scrub")
    with ThreadPoolExecutor(len(commands)) as pool:  # at once: each starts Django, seconds apiece
        finished = list(pool.map(start, commands))
    for done in finished:
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"CommandError: {path}: not valid JSON: bytes that are not UTF-8 text, within the first 65,536 bytes"
        ]
        assert key_pieces(done.stdout + done.stderr) == []


# --- 8. impossible values: exit 2, file + simulation + field ---------------------------
def tau2_with(tmp_path: Path, change: dict[str, Any], name: str = "results.json") -> Path:
    data = json.loads(fixture("airline-oracle").read_text())
    sim = data["simulations"][0]
    for key, value in change.items():
        if key == "reward":
            sim["reward_info"]["reward"] = value
        else:
            sim[key] = value
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


FIRST = "simulation 1 (task 11, trial 0)"
TAU2_CASES = {
    "huge-cost": ({"agent_cost": 1e300}, "agent_cost 1e+300 is not a cost in dollars (0 to 1,000,000)"),
    "negative-cost": ({"user_cost": -0.01}, "user_cost -0.01 is not a cost in dollars (0 to 1,000,000)"),
    "cost-as-text": ({"agent_cost": "0.5"}, "agent_cost is not a number"),
    "reward-above-1": ({"reward": 1.5}, "reward_info.reward 1.5 is not a reward between 0 and 1"),
    "reward-below-0": ({"reward": -0.25}, "reward_info.reward -0.25 is not a reward between 0 and 1"),
    "reward-as-text": ({"reward": "1"}, "reward_info.reward is not a number"),
    "bad-start-time": ({"start_time": "yesterday at noon"}, "start_time is not an ISO 8601 date-time"),
    "numeric-end-time": ({"end_time": 1733140000}, "end_time is not a time (an ISO 8601 string)"),
    "negative-duration": ({"duration": -3.0}, "duration -3 is not a duration in seconds (0 to a year)"),
    "huge-trial": ({"trial": 10**12}, None),
}


@pytest.mark.parametrize("case", sorted(TAU2_CASES))
@pytest.mark.parametrize("command", ["tau2_summary", "tau2_convert", "import_tau2"])
def test_an_impossible_value_in_a_results_file_is_refused(case, command, tmp_path, db):
    change, problem = TAU2_CASES[case]
    path = tau2_with(tmp_path, change)
    error = refused(*command_args(command, path))
    assert error.returncode == 2
    if problem is None:  # the task/trial name changes with the trial itself
        assert str(error) == f"{path}: simulation 1 (task 11, trial 1000000000000): trial 1000000000000 is out of range (0 to 2147483647)"
    else:
        assert str(error) == f"{path}: {FIRST}: {problem}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    assert BenchmarkRun.objects.count() == 0 and BenchmarkItem.objects.count() == 0


def ledger_with(tmp_path: Path, change: dict[str, Any]) -> Path:
    good = tmp_path / "good.ledger.json"
    call_command("tau2_convert", str(fixture("airline-oracle")), "--out", str(good), stdout=io.StringIO())
    data = json.loads(good.read_text())
    data["items"][0].update(change)
    path = tmp_path / "bad.ledger.json"
    path.write_text(json.dumps(data))
    good.unlink()
    return path


LEDGER_CASES = {
    "huge-cost": ({"agent_cost_usd": 1e300}, "agent_cost_usd 1e+300 is not a cost in dollars (0 to 1,000,000)"),
    "negative-cost": ({"user_cost_usd": -1}, "user_cost_usd -1 is not a cost in dollars (0 to 1,000,000)"),
    "reward-above-1": ({"reward": 2}, "reward 2 is not a reward between 0 and 1"),
    "bad-time": ({"end_time": "soon"}, "end_time is not an ISO 8601 date-time"),
}


@pytest.mark.parametrize("case", sorted(LEDGER_CASES))
def test_an_impossible_value_in_a_ledger_file_is_refused(case, tmp_path, db):
    change, problem = LEDGER_CASES[case]
    path = ledger_with(tmp_path, change)
    error = refused(*command_args("benchmark_import", path))
    assert (error.returncode, str(error)) == (2, f"{path}: item 1 (task 11, trial 0): {problem}")
    assert BenchmarkRun.objects.count() == 0


@pytest.mark.parametrize("literal, problem", [("NaN", "NaN is not a JSON number"), ("1e400", "a number too large for a double")])
def test_nan_and_overflowing_numbers_in_a_ledger_file_are_refused(literal, problem, tmp_path, db):
    path = ledger_with(tmp_path, {"agent_cost_usd": 12345.5})
    path.write_text(path.read_text().replace("12345.5", literal))
    error = refused(*command_args("benchmark_import", path))
    assert (error.returncode, str(error)) == (2, f"{path}: not JSON: {problem}")
    assert BenchmarkRun.objects.count() == 0


def test_a_huge_cost_through_manage_py_is_one_line_and_exit_2(tmp_path):
    """The probe's case: import_tau2 with agent_cost 1e300 ended in a traceback (exit 1)."""
    path = tau2_with(tmp_path, {"agent_cost": 1e300})
    database = tmp_path / "ledger.sqlite3"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "marina.settings", "DATABASE_URL": f"sqlite:///{database}"}
    run = {"cwd": ROOT, "env": env, "capture_output": True, "text": True, "timeout": 120}
    done = subprocess.run([sys.executable, "manage.py", "import_tau2", str(path), "--target", "m"], **run)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"CommandError: {path}: {FIRST}: agent_cost 1e+300 is not a cost in dollars (0 to 1,000,000)"]
    # Refused while the file is read, before the ledger is opened: SQLite never made its file.
    assert not database.exists()


def test_cost_usd_beyond_what_the_ledger_holds_is_refused(tmp_path, db):
    error = refused(*command_args("import_tau2", fixture("airline-oracle")), "--cost-usd", "1e300")
    assert error.returncode == 2 and "--cost-usd must be a number of dollars from 0 to 1,000,000,000" in str(error)
