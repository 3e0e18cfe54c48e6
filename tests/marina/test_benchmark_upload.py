"""POST /v1/benchmarks/runs (marina/benchmark_upload.py) through Marina's whole
application (in-process: tests/conftest.py's `marina`): a client files runs with a Marina key."""
from __future__ import annotations

import json

import httpx
import pytest

from ledger.benchmarks.importers import convert_tau2
from ledger.models import BenchmarkItem, BenchmarkRun
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina
from tests.ledger.tau2files import FAKE_KEY, banking_copy, expected, intended_pass_hat_k, results

AUTH = {"Authorization": f"Bearer {MARINA_KEY}"}


def _post(marina: InProcessMarina, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return marina.http.post("/v1/benchmarks/runs", content=content, headers={**AUTH, **(headers or {})}, timeout=60)


def test_files_a_tau2_results_file_then_recognises_it(marina):
    data = json.loads(results("airline-infra-errors").read_text())
    body = {"result": data, "targetKind": "model", "target": "openrouter/oracle-agent", "label": "nightly",
            "judge": "gpt-4.1 @ openrouter", "costUsd": 1.25, "replicateGroup": "nightly-airline"}  # fmt: skip
    reply = _post(marina, body)
    assert reply.status_code == 201, reply.text
    run = BenchmarkRun.objects.get(pk=reply.json()["run_id"])
    assert (run.label, run.judge, run.group, run.cost_source, str(run.cost_usd)) == (
        "nightly", "gpt-4.1 @ openrouter", "nightly-airline", "cli", "1.250000000",
    )  # fmt: skip
    assert run.pass_hat_k == pytest.approx(intended_pass_hat_k("airline-infra-errors"), abs=1e-6)
    assert (run.infra_errors, BenchmarkItem.objects.filter(run=run).count()) == (2, 40)
    assert FAKE_KEY not in json.dumps(run.agent_args) + reply.text
    again = _post(marina, body)
    assert again.status_code == 200 and again.json()["already_imported"] and again.json()["run_id"] == run.pk


@pytest.mark.parametrize("fmt", ["marina", "original"])
def test_files_a_ledger_file_in_either_format(marina, tmp_path, fmt):
    _, path = convert_tau2(results("retail-oracle"), tmp_path / "l.json", fmt=fmt)
    reply = _post(marina, {"result": json.loads(path.read_text()), "targetKind": "crew", "target": "crew-a"})
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
def test_bad_uploads_are_400_with_the_reason_and_write_nothing(marina, body, param, words):
    reply = _post(marina, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert words in error["message"] and error["param"] == param and error["type"] == "invalid_request_error"
    assert "marina-upload-" not in error["message"]  # the temporary file's name never shows
    assert not BenchmarkRun.objects.exists()


def test_too_large_is_413_and_no_key_is_401(marina, settings):
    settings.MARINA_MAX_UPLOAD_BYTES = 2048
    reply = _post(marina, {"result": {"x": "y" * 4096}, "targetKind": "model", "target": "m"})
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "request_too_large"
    anonymous = marina.http.post("/v1/benchmarks/runs", json={"result": {}}, timeout=30)
    assert anonymous.status_code == 401
    assert not BenchmarkRun.objects.exists()


def test_an_open_api_files_nothing_unless_allowed(marina, settings, tmp_path):
    settings.MODEL_API_KEYS = ""
    settings.MARINA_OPEN_API = True
    _, path = convert_tau2(results("airline-oracle"), tmp_path / "l.json")
    body = {"result": json.loads(path.read_text()), "targetKind": "model", "target": "m"}
    reply = marina.http.post("/v1/benchmarks/runs", json=body, timeout=60)
    assert reply.status_code == 403 and reply.json()["error"]["code"] == "open_api_read_only"
    assert not BenchmarkRun.objects.exists()
    settings.MARINA_OPEN_API_UPLOADS = True
    assert marina.http.post("/v1/benchmarks/runs", json=body, timeout=60).status_code == 201


def test_an_upload_and_the_command_line_share_the_import_key(marina):
    """The same results file, imported from disk and uploaded (re-serialised by the
    harness, so other bytes), is one run whichever comes first."""
    from ledger.benchmarks.importers import import_tau2

    first = import_tau2(results("airline-oracle"), target="openrouter/oracle-agent").run
    body = {"result": json.loads(results("airline-oracle").read_text()), "targetKind": "model", "target": "x"}
    reply = _post(marina, body)
    assert (reply.status_code, reply.json()["run_id"], reply.json()["sha256"]) == (200, first.pk, first.source_sha256)
    filed = _post(marina, {**body, "result": json.loads(results("retail-oracle").read_text())})
    assert filed.status_code == 201
    again = import_tau2(results("retail-oracle"), target="y")
    assert (again.created, again.run.pk) == (False, filed.json()["run_id"])
    assert BenchmarkRun.objects.count() == 2


BOB_KEY = "sk-marina-bob-key-0000000000000000"
BOB = {"Authorization": f"Bearer {BOB_KEY}"}
READER_KEY = "sk-marina-reader-key-000000000000"


def test_a_run_is_its_keys_another_key_neither_reads_nor_writes_into_it(marina, settings):
    """Issue 42 C3: Bob filed into Alice's replicate group (201) and got her run
    back by uploading the same result (200). Now the run and its group are the
    key's that filed them; Bob reads them only with a read-all key."""
    from passthru import auth

    settings.MODEL_API_KEYS = f"{MARINA_KEY}:alice,{BOB_KEY}:bob"
    auth.forget()
    alices = {"result": json.loads(results("airline-oracle").read_text()), "targetKind": "model", "target": "m",
              "replicateGroup": "alice-group"}  # fmt: skip
    filed = _post(marina, alices)
    assert filed.status_code == 201, filed.text
    run = BenchmarkRun.objects.get(pk=filed.json()["run_id"])
    assert run.key_name == "alice"

    into_hers = _post(marina, {**alices, "result": json.loads(results("retail-oracle").read_text())}, BOB)
    assert into_hers.status_code == 403, into_hers.text
    assert into_hers.json()["error"]["param"] == "replicateGroup"
    assert into_hers.json()["error"]["message"] == (  # which key's, it does not say
        "The replicate group 'alice-group' holds runs another key filed: file into a group of your own."
    )
    same_file = _post(marina, {**alices, "replicateGroup": None}, BOB)
    assert same_file.status_code == 409 and str(run.pk) not in same_file.text and "run_id" not in same_file.text
    assert list(BenchmarkRun.objects.values_list("pk", flat=True)) == [run.pk]  # nothing written

    def read(path: str, headers: dict[str, str]) -> int:
        return marina.http.get(path, headers=headers, timeout=30).status_code

    assert read(f"/api/runs/{run.pk}", AUTH) == 200
    assert read(f"/api/runs/{run.pk}", BOB) == 404
    listed = marina.http.get("/api/runs", headers=BOB, timeout=30).json()
    assert (listed["count"], listed["runs"]) == (0, [])
    assert marina.http.get("/api/runs", headers=AUTH, timeout=30).json()["count"] == 1
    assert read("/api/compare?group_a=alice-group&group_b=alice-group", BOB) == 404
    assert read(f"/api/compare?a={run.pk}&b={run.pk}", BOB) == 404
    frontier = marina.http.get("/api/frontier", headers=BOB, timeout=30).json()
    assert (frontier["total"], frontier["points"]) == (0, [])
    assert marina.http.get("/api/frontier", headers=AUTH, timeout=30).json()["total"] == 1
    reader = auth.create_key("auditor", reads_all=True)
    assert read(f"/api/runs/{run.pk}", {"Authorization": f"Bearer {reader}"}) == 200
    # Bob files into a group of his own, and Alice's key then cannot write there.
    bobs = _post(marina, {**alices, "result": json.loads(results("retail-oracle").read_text()), "replicateGroup": "bob-group"}, BOB)
    assert bobs.status_code == 201 and BenchmarkRun.objects.get(pk=bobs.json()["run_id"]).key_name == "bob"
    assert read(f"/api/runs/{bobs.json()['run_id']}", AUTH) == 404


def test_a_group_the_command_line_filled_takes_no_keys_run(marina):
    from ledger.benchmarks.importers import import_tau2

    operators = import_tau2(results("airline-oracle"), target="m", group="operators").run
    body = {"result": json.loads(results("retail-oracle").read_text()), "targetKind": "model", "target": "m",
            "replicateGroup": "operators"}  # fmt: skip
    assert _post(marina, body).status_code == 403
    assert _post(marina, {**body, "replicateGroup": "mine"}).status_code == 201
    # The operator's own run uploaded again writes nothing: recognised, as before owners (every key reads it).
    again = _post(marina, {**body, "result": json.loads(results("airline-oracle").read_text())})
    assert (again.status_code, again.json()["run_id"]) == (200, operators.pk)


def test_a_banking_upload_answers_with_its_retrieval_config(marina, tmp_path):
    data = json.loads(banking_copy(tmp_path / "b.json", "bm25", {"top_k": 5, "api_key": FAKE_KEY}).read_text())
    reply = _post(marina, {"result": data, "targetKind": "model", "target": "openrouter/oracle-agent"})
    assert reply.status_code == 201, reply.text
    assert (reply.json()["retrieval_config"], reply.json()["retrieval_config_kwargs"]) == ("bm25", {"top_k": 5})
    assert BenchmarkRun.objects.get(pk=reply.json()["run_id"]).retrieval_config == "bm25"
    assert FAKE_KEY not in reply.text
