"""Start-up configuration: `.env` is read (the environment wins over it), the
daily cap's no-cap spellings, and a malformed variable stopping start-up with
one line naming it. Each case runs the real settings in a fresh interpreter: the settings module
alone where a value read is the subject (a tenth of the CPU of Django's whole set-up, which imports
every app), manage.py or gunicorn where the start-up is."""
from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from kernel.env import ConfigError, env_float, env_int, env_money_or_off
from tests.e2e.servers import PROJECT_ROOT, clean_environ, free_port

SETTINGS = (
    "import json; from django.conf import settings as s; "
    "print(json.dumps({'cap': str(s.MARINA_DAILY_SPEND_CAP_USD), 'rounds': s.MARINA_VERIFY_ROUNDS, "
    "'aliases': s.MARINA_MODEL_ALIASES, 'keys': s.MODEL_API_KEYS}))"
)


def run(code: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *code],
        cwd=PROJECT_ROOT,
        env=clean_environ({"DJANGO_SETTINGS_MODULE": "marina.settings", **env}),
        capture_output=True,
        text=True,
        timeout=120,
    )


def settings_with(env: dict[str, str]) -> dict[str, object]:
    done = run(["-c", SETTINGS], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_dot_env_is_read_and_the_environment_wins_over_it(tmp_path: Path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# a comment\n"
        "MARINA_VERIFY_ROUNDS=2\n"
        'MARINA_MODEL_ALIASES="fast=openrouter/openai/gpt-5.2"\n'
        "MODEL_API_KEYS=sk-from-file:file\n"
        "MARINA_DAILY_SPEND_CAP_USD=7.5\n"
    )
    found = settings_with({"MARINA_ENV_FILE": str(env_file), "MARINA_DAILY_SPEND_CAP_USD": "3"})
    assert found["rounds"] == 2
    assert found["aliases"] == {"fast": "openrouter/openai/gpt-5.2"}
    assert found["keys"] == "sk-from-file:file"
    assert found["cap"] == "3"  # the environment's value, not the file's


def test_earlier_secrets_are_read_whitespace_separated(tmp_path: Path):
    code = "from django.conf import settings as s; print(repr(s.SECRET_KEY_FALLBACKS))"
    done = run(["-c", code], {"MARINA_SECRET_KEY_FALLBACKS": " old-one\n older-two "})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['old-one', 'older-two']"
    assert run(["-c", code], {}).stdout.strip() == "[]"


def test_a_builtin_provider_pointed_at_this_machine_needs_no_key(tmp_path: Path):
    """The README's `MARINA_OPENROUTER_BASE_URL=http://127.0.0.1:9000/v1` alone serves openrouter/*
    (it answered 503 `provider_not_configured` asking for OPENROUTER_API_KEY); a remote one still needs its key."""
    code = (
        "import json; from passthru.providers import providers; p = providers(); "
        "print(json.dumps({n: p[n].configured for n in ('openrouter', 'openai', 'groq', 'together')}))"
    )
    done = run(["-c", code], {
        "MARINA_OPENROUTER_BASE_URL": "http://127.0.0.1:9000/v1", "MARINA_OPENAI_BASE_URL": "http://localhost:8000/v1",
        "MARINA_GROQ_BASE_URL": "https://groq.example.com/v1",
    })
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"openrouter": True, "openai": True, "groq": False, "together": False}


def test_gunicorn_reads_dot_env_too(tmp_path: Path):
    env_file = tmp_path / ".env"
    env_file.write_text("MARINA_BIND=127.0.0.1:4711\nMARINA_WORKERS=3\n")
    code = "import runpy, json; c = runpy.run_path('gunicorn.conf.py'); print(json.dumps([c['bind'], c['workers']]))"
    done = run(["-c", code], {"MARINA_ENV_FILE": str(env_file)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["127.0.0.1:4711", 3]


def test_gunicorn_takes_blank_server_settings_as_their_defaults(tmp_path: Path):
    """.env.example: blank means the default; a copied .env with MARINA_BIND= or MARINA_WORKERS= must start."""
    env_file = tmp_path / ".env"
    env_file.write_text("MARINA_BIND=\nMARINA_WORKERS=\nMARINA_WORKER_TIMEOUT=\nMARINA_GRACEFUL_TIMEOUT=\nMARINA_LOG_LEVEL=\n")
    code = (
        "import runpy, json; c = runpy.run_path('gunicorn.conf.py'); "
        "print(json.dumps([c['bind'], c['workers'], c['timeout'], c['graceful_timeout'], c['loglevel']]))"
    )
    done = run(["-c", code], {"MARINA_ENV_FILE": str(env_file), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["127.0.0.1:3300", 2, 900, 660, "info"]


@pytest.mark.parametrize("raw, level", [("info", "INFO"), ("Warning", "WARNING"), ("DEBUG", "DEBUG"), ("", "INFO")])
def test_the_log_level_is_taken_in_any_case(raw: str, level: str):
    """MARINA_LOG_LEVEL=info stopped every worker (logging knows only 'INFO'); gunicorn's is lower case."""
    code = (  # logging configured as django.setup() does it first, without importing every app after
        "from django.conf import settings as s; from django.utils.log import configure_logging; "
        "configure_logging(s.LOGGING_CONFIG, s.LOGGING); import logging; print(logging.getLevelName(logging.getLogger().level))"
    )
    done = run(["-c", code], {"MARINA_LOG_LEVEL": raw})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == level


@pytest.mark.parametrize("name, raw", [
    ("MARINA_WORKERS", "two"), ("MARINA_WORKERS", "0"), ("MARINA_WORKER_TIMEOUT", "15m"), ("MARINA_LOG_LEVEL", "loud"),
])
def test_junk_server_settings_stop_gunicorn_with_one_line(name: str, raw: str, tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "marina.asgi:application"],
        cwd=PROJECT_ROOT,
        env=clean_environ({name: raw, "MARINA_BIND": f"127.0.0.1:{free_port()}", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}),
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: Marina's configuration: {name} must be"), done.stderr


def test_a_named_env_file_that_does_not_exist_stops_start_up(tmp_path: Path):
    done = run(["manage.py", "check"], {"MARINA_ENV_FILE": str(tmp_path / "missing.env")})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"Marina's configuration: MARINA_ENV_FILE: no such file {tmp_path / 'missing.env'}"]


@pytest.mark.parametrize("raw", ["0", "0.00", "unlimited", "Unlimited", "off", "none"])
def test_zero_and_unlimited_mean_no_daily_cap(raw: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MARINA_DAILY_SPEND_CAP_USD", raw)
    assert env_money_or_off("MARINA_DAILY_SPEND_CAP_USD", "50") is None


@pytest.mark.parametrize("raw, cap", [("", Decimal("50")), ("  ", Decimal("50")), ("12.5", Decimal("12.5"))])
def test_a_dollar_amount_or_blank_for_the_default(raw: str, cap: Decimal, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MARINA_DAILY_SPEND_CAP_USD", raw)
    assert env_money_or_off("MARINA_DAILY_SPEND_CAP_USD", "50") == cap


@pytest.mark.parametrize("raw", ["lots", "$5", "nan", "inf", "-1", "5 dollars"])
def test_junk_cap_is_refused_naming_the_variable(raw: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MARINA_DAILY_SPEND_CAP_USD", raw)
    with pytest.raises(ConfigError, match=r"^MARINA_DAILY_SPEND_CAP_USD must be a dollar amount .*unlimited"):
        env_money_or_off("MARINA_DAILY_SPEND_CAP_USD", "50")


@pytest.mark.parametrize(
    ("read", "raw", "want"),
    [
        (env_int, "", 7), (env_int, " 12 ", 12), (env_float, "", 7), (env_float, "0.25", 0.25),
        (env_int, "1.5", "^MARINA_X must be a whole number, not '1.5'$"),
        (env_int, "-2", "^MARINA_X must be at least 0, not -2$"),
        (env_float, "fast", "^MARINA_X must be a number, not 'fast'$"),
        (env_float, "-0.5", r"^MARINA_X must be at least 0.0, not -0.5$"),
    ],
)  # fmt: skip
def test_numbers_read_or_refused_naming_the_variable(read, raw: str, want, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MARINA_X", raw)
    if isinstance(want, str):
        with pytest.raises(ConfigError, match=want):
            read("MARINA_X", 7)
    else:
        got = read("MARINA_X", 7)
        assert got == want and type(got) is type(want)


def test_the_settings_read_unlimited_as_no_cap():
    assert settings_with({"MARINA_DAILY_SPEND_CAP_USD": "unlimited"})["cap"] == "None"
    assert settings_with({"MARINA_DAILY_SPEND_CAP_USD": "0"})["cap"] == "None"


def test_junk_stops_manage_py_with_one_line():
    done = run(["manage.py", "check"], {"MARINA_DAILY_SPEND_CAP_USD": "lots"})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "Marina's configuration: MARINA_DAILY_SPEND_CAP_USD must be a dollar amount such as 50, "
        "or 0 / unlimited / off for no cap, not 'lots'"
    ]


@pytest.mark.e2e
def test_junk_stops_gunicorn_before_any_worker_with_one_line(tmp_path: Path):
    env = clean_environ(
        {"MARINA_BIND": f"127.0.0.1:{free_port()}", "MARINA_DAILY_SPEND_CAP_USD": "lots", "DATABASE_URL": f"sqlite:///{tmp_path}/db"}
    )
    done = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "marina.asgi:application"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert "Error: Marina's configuration: MARINA_DAILY_SPEND_CAP_USD must be a dollar amount" in done.stderr
    assert "Traceback" not in done.stderr and "Booting worker" not in done.stderr


def test_marina_lessons_takes_on_observe_or_off_and_nothing_else():
    done = run(["-c", "from django.conf import settings as s; print(s.MARINA_LESSONS)"], {"MARINA_LESSONS": " Observe "})
    assert done.returncode == 0 and done.stdout.strip() == "observe", done.stderr
    done = run(["manage.py", "check"], {"MARINA_LESSONS": "sometimes"})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "Marina's configuration: MARINA_LESSONS must be on, observe or off, not 'sometimes'"
    ]


def test_a_blank_prometheus_folder_as_in_env_example_writes_no_files_here(tmp_path: Path):
    """.env.example lists PROMETHEUS_MULTIPROC_DIR= blank; prometheus-client took a set-but-blank
    variable as multiprocess mode in the current folder, and every manage.py command left its
    counter_<pid>.db files there."""
    env_file = tmp_path / ".env"
    env_file.write_text("PROMETHEUS_MULTIPROC_DIR=\n")
    work = tmp_path / "here"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "manage.py"), "check"],
        cwd=work,
        env=clean_environ({"MARINA_ENV_FILE": str(env_file), "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}),
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert list(work.iterdir()) == []


def test_a_spool_bound_below_the_room_calls_in_flight_need_stops_start_up():
    """Issue 42 A7: 65536 was accepted, and then every call was refused 503 naming the database."""
    done = run(["manage.py", "check"], {"MARINA_SPOOL_MAX_BYTES": "65536"})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "Marina's configuration: MARINA_SPOOL_MAX_BYTES must be at least 294912 (256 KiB kept for the calls "
        "in flight and room for records beside it), not 65536"
    ]


@pytest.mark.e2e
def test_a_spool_directory_that_cannot_be_written_stops_gunicorn_with_one_line(tmp_path: Path):
    """Issue 42 A6: a spool that cannot be written made every call 503 with the
    database well; now the server does not start. (As root a mode of 0500 is
    still writable: the directory sits under a regular file instead.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = clean_environ({
        "MARINA_BIND": f"127.0.0.1:{free_port()}", "DATABASE_URL": f"sqlite:///{tmp_path}/db",
        "MARINA_SPOOL_DIR": str(blocker / "spool"),
    })
    done = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "marina.asgi:application"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert f"Error: Marina's configuration: MARINA_SPOOL_DIR={blocker / 'spool'} cannot be written (Not a directory)" in done.stderr
    assert "Traceback" not in done.stderr and "Booting worker" not in done.stderr


def test_a_worker_freezes_what_it_loaded(tmp_path: Path):
    """gunicorn.conf.py's post_worker_init: the app's objects out of every collection's reach (docs/performance.md)."""
    code = "import gc, runpy, json; c = runpy.run_path('gunicorn.conf.py'); c['post_worker_init'](None); print(gc.get_freeze_count())"
    done = run(["-c", code], {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 10_000  # what the conf and its imports loaded


@pytest.mark.parametrize("value, backlog", [("", 16384), ("512", 512)])
def test_the_accept_queue_holds_a_burst_of_new_connections(tmp_path: Path, value: str, backlog: int):
    """gunicorn's own 2,048 dropped connection attempts of a 10,000-stream burst (clients retry 1 s later)."""
    code = "import runpy; print(runpy.run_path('gunicorn.conf.py')['backlog'])"
    done = run(["-c", code], {"MARINA_BACKLOG": value, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == backlog
