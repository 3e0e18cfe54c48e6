"""POST /v1/benchmarks/runs (marina/benchmark_upload.py) against a live Marina:
a second process (this test, over HTTP) files runs with a Marina key."""
from __future__ import annotations

import json

import httpx
import pytest

from ledger.benchmarks.importers import convert_tau2
from ledger.models import BenchmarkItem, BenchmarkRun
from tests.conftest import MARINA_KEY
from tests.ledger.tau2files import FAKE_KEY, banking_copy, expected, intended_pass_hat_k, results

AUTH = {"Authorization": f"Bearer {MARINA_KEY}"}


def _post(url: str, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}/v1/benchmarks/runs", content=content, headers={**AUTH, **(headers or {})}, timeout=60)


def test_files_a_tau2_results_file_then_recognises_it(marina_url):
    data = json.loads(results("airline-infra-errors").read_text())
    body = {"result": data, "targetKind": "model", "target": "openrouter/oracle-agent", "label": "nightly",
            "judge": "gpt-4.1 @ openrouter", "costUsd": 1.25, "replicateGroup": "nightly-airline"}  # fmt: skip
    reply = _post(marina_url, body)
    assert reply.status_code == 201, reply.text
    run = BenchmarkRun.objects.get(pk=reply.json()["run_id"])
    assert (run.label, run.judge, run.group, run.cost_source, str(run.cost_usd)) == (
        "nightly", "gpt-4.1 @ openrouter", "nightly-airline", "cli", "1.250000000",
    )  # fmt: skip
    assert run.pass_hat_k == pytest.approx(intended_pass_hat_k("airline-infra-errors"), abs=1e-6)
    assert (run.infra_errors, BenchmarkItem.objects.filter(run=run).count()) == (2, 40)
    assert FAKE_KEY not in json.dumps(run.agent_args) + reply.text
    again = _post(marina_url, body)
    assert again.status_code == 200 and again.json()["already_imported"] and again.json()["run_id"] == run.pk


@pytest.mark.parametrize("fmt", ["marina", "original"])
def test_files_a_ledger_file_in_either_format(marina_url, tmp_path, fmt):
    _, path = convert_tau2(results("retail-oracle"), tmp_path / "l.json", fmt=fmt)
    reply = _post(marina_url, {"result": json.loads(path.read_text()), "targetKind": "crew", "target": "crew-a"})
    assert reply.status_code == 201, reply.text
    assert reply.json()["mean_reward"] == pytest.approx(expected("retail-oracle")["avg_reward"])


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (b"{not json", None, "not JSON"),
        ({"targetKind": "model", "target": "m"}, "result", "`result`"),
        ({"result": {"format": "marina-ledger"}, "targetKind": "model"}, "target", "`target` is required"),
        ({"result": {"x": 1}, "targetKind": "model", "target": "m"}, None, "result: not a ledger file"),
        ({"result": {"info": {}, "simulations": []}, "targetKind": "model", "target": "m"}, None, "result: holds no simulations"),
        ({"result": {"info": {}, "simulations": []}, "targetKind": "robot", "target": "m"}, None, "target-kind"),
        ({"result": {"config": {"dataset": "d"}, "items": [{"id": "1#0", "correct": True}]}, "targetKind": "model",
          "target": "m", "costUsd": -1}, None, "costUsd"),
    ],
)  # fmt: skip
def test_bad_uploads_are_400_with_the_reason_and_write_nothing(marina_url, body, param, words):
    reply = _post(marina_url, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert words in error["message"] and error["param"] == param and error["type"] == "invalid_request_error"
    assert "marina-upload-" not in error["message"]  # the temporary file's name never shows
    assert not BenchmarkRun.objects.exists()


def test_too_large_is_413_and_no_key_is_401(marina_url, settings):
    settings.MARINA_MAX_UPLOAD_BYTES = 2048
    reply = _post(marina_url, {"result": {"x": "y" * 4096}, "targetKind": "model", "target": "m"})
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "request_too_large"
    anonymous = httpx.post(f"{marina_url}/v1/benchmarks/runs", json={"result": {}}, timeout=30)
    assert anonymous.status_code == 401
    assert not BenchmarkRun.objects.exists()


def test_an_open_api_files_nothing_unless_allowed(marina_url, settings, tmp_path):
    settings.MODEL_API_KEYS = ""
    settings.MARINA_OPEN_API = True
    _, path = convert_tau2(results("airline-oracle"), tmp_path / "l.json")
    body = {"result": json.loads(path.read_text()), "targetKind": "model", "target": "m"}
    reply = httpx.post(f"{marina_url}/v1/benchmarks/runs", json=body, timeout=60)
    assert reply.status_code == 403 and reply.json()["error"]["code"] == "open_api_read_only"
    assert not BenchmarkRun.objects.exists()
    settings.MARINA_OPEN_API_UPLOADS = True
    assert httpx.post(f"{marina_url}/v1/benchmarks/runs", json=body, timeout=60).status_code == 201


def test_an_upload_and_the_command_line_share_the_import_key(marina_url):
    """The same results file, imported from disk and uploaded (re-serialised by the
    harness, so other bytes), is one run whichever comes first."""
    from ledger.benchmarks.importers import import_tau2

    first = import_tau2(results("airline-oracle"), target="openrouter/oracle-agent").run
    body = {"result": json.loads(results("airline-oracle").read_text()), "targetKind": "model", "target": "x"}
    reply = _post(marina_url, body)
    assert (reply.status_code, reply.json()["run_id"], reply.json()["sha256"]) == (200, first.pk, first.source_sha256)
    filed = _post(marina_url, {**body, "result": json.loads(results("retail-oracle").read_text())})
    assert filed.status_code == 201
    again = import_tau2(results("retail-oracle"), target="y")
    assert (again.created, again.run.pk) == (False, filed.json()["run_id"])
    assert BenchmarkRun.objects.count() == 2


def test_a_banking_upload_answers_with_its_retrieval_config(marina_url, tmp_path):
    data = json.loads(banking_copy(tmp_path / "b.json", "bm25", {"top_k": 5, "api_key": FAKE_KEY}).read_text())
    reply = _post(marina_url, {"result": data, "targetKind": "model", "target": "openrouter/oracle-agent"})
    assert reply.status_code == 201, reply.text
    assert (reply.json()["retrieval_config"], reply.json()["retrieval_config_kwargs"]) == ("bm25", {"top_k": 5})
    assert BenchmarkRun.objects.get(pk=reply.json()["run_id"]).retrieval_config == "bm25"
    assert FAKE_KEY not in reply.text
