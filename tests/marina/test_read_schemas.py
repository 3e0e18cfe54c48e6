"""Every /api answer is what docs/openapi.json says it is (marina/read_schemas.py):
on the demo's data (runs, groups, traces with formations, an experiment), each
operation's 200 answer is walked beside its committed schema, key by key: every
key the answer carries is declared (an undeclared one would reach clients
undocumented, as `additionalProperties`), every required one is there, and each
value has the declared JSON type."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ledger import demo
from ledger.models import BenchmarkRun, Experiment, Trace
from tests.marina.test_read_api import get, staff_client

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
NOW = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
JSON_TYPES = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
    "integer": int, "number": (int, float),
}  # fmt: skip


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return resolve(SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[-1]])


def problems(value: Any, schema: dict[str, Any], at: str = "$") -> list[str]:
    """Where `value` departs from `schema` (the subset of JSON Schema Ninja writes)."""
    schema = resolve(schema)
    if "anyOf" in schema:
        tries = [problems(value, option, at) for option in schema["anyOf"]]
        return [] if any(not found for found in tries) else min(tries, key=len)
    kind = schema.get("type")
    if kind is None:  # Any
        return []
    if not isinstance(value, JSON_TYPES[kind]) or (kind in ("integer", "number") and isinstance(value, bool)):
        return [f"{at}: {type(value).__name__}, not {kind}"]
    found: list[str] = []
    if kind == "array":
        for i, element in enumerate(value):
            found += problems(element, schema.get("items", {}), f"{at}[{i}]")
    if kind == "object" and "properties" in schema:
        declared = schema["properties"]
        found += [f"{at}.{key}: not in the schema" for key in value if key not in declared]
        found += [f"{at}.{key}: required, missing" for key in schema.get("required", ()) if key not in value]
        for key, element in value.items():
            if key in declared:
                found += problems(element, declared[key], f"{at}.{key}")
    return found


def answer_schema(path: str, method: str = "get", status: str = "200") -> dict[str, Any]:
    return SCHEMA["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]


def test_every_api_answer_on_the_demo_is_its_schema(db) -> None:
    demo.load_demo(now=NOW)
    client = staff_client()
    runs = {r.source_name.removeprefix("demo/").removesuffix(".ledger.json"): r for r in BenchmarkRun.objects.all()}
    plain, verify, mini = runs["airline-1"], runs["airline-1-verify"], runs["airline-mini"]
    groups = sorted({r.group for r in runs.values() if r.group})
    formation_trace = Trace.objects.filter(route__contains="verify").exclude(body=None).first() or Trace.objects.first()
    experiment = Experiment.objects.first()
    assert formation_trace is not None and experiment is not None and len(groups) >= 2
    asked = {
        "/api/runs": ["/api/runs?per_page=200"],
        "/api/runs/{run_id}": [f"/api/runs/{r.pk}" for r in (plain, verify, mini)],
        "/api/compare": [f"/api/compare?a={plain.pk}&b={verify.pk}&resamples=50",
                         f"/api/compare?group_a={groups[0]}&group_b={groups[1]}&resamples=50"],
        "/api/spend": ["/api/spend?since=2026-11-20&until=2026-12-02"],
        "/api/traces/{request_id}": [f"/api/traces/{quote(formation_trace.request_id, safe='')}"],
        "/api/frontier": ["/api/frontier", "/api/frontier?by=group"],
        "/api/trajectories": [f"/api/trajectories?a={plain.pk}&b={verify.pk}&task=23",
                              f"/api/trajectories?a={plain.pk}&b={mini.pk}&task=23"],
        "/api/experiments/{experiment_id}/progress": [f"/api/experiments/{experiment.pk}/progress"],
        "/api/formations": ["/api/formations"],
    }  # fmt: skip
    api_paths = {path for path in SCHEMA["paths"] if path.startswith("/api/")}
    assert set(asked) == api_paths, "every /api operation is asked here"
    for path, urls in asked.items():
        schema = answer_schema(path)
        assert "$ref" in schema, f"{path}: a typed schema, not an untyped object"
        for url in urls:
            status, body = get(client, url)
            assert status == 200, (url, body)
            assert problems(body, schema) == [], url


def test_an_uploads_answer_is_its_schema(db) -> None:
    """POST /v1/benchmarks/runs answers an import's as_dict (and `source`): a new run (201) and
    the same file again (200), each as the ImportedRun schema says."""
    from ledger.benchmarks.importers import import_loaded
    from ledger.benchmarks.options import ImportOptions
    from tests.ledger.conftest import _read
    from tests.ledger.tau2files import results

    for status, created in (("201", True), ("200", False)):
        options = ImportOptions(target="openrouter/oracle-agent", cost_usd=0.8)
        result = import_loaded(_read("airline-oracle"), results("airline-oracle"), options)
        assert result.created is created
        answer = json.loads(json.dumps({**result.as_dict(), "source": "upload"}, default=str))
        assert problems(answer, answer_schema("/v1/benchmarks/runs", "post", status)) == []


def test_the_walk_finds_what_it_should() -> None:
    """The checker itself: an undeclared key, a missing one and a wrong type are each found."""
    schema = {"$ref": "#/components/schemas/Formations"}
    good = {"templates": [{"template": "t", "formation": "f", "prefix": "p", "about": "a", "example": "e"}], "note": ""}
    assert problems(good, schema) == []
    assert problems({**good, "extra": 1}, schema) == ["$.extra: not in the schema"]
    assert problems({"templates": []}, schema) == ["$.note: required, missing"]
    assert problems({**good, "note": 3}, schema) == ["$.note: int, not string"]
    bad_row = {**good, "templates": [{**good["templates"][0], "template": None}]}
    assert problems(bad_row, schema) == ["$.templates[0].template: NoneType, not string"]


@pytest.mark.parametrize("path", ["/api/runs", "/api/compare", "/api/spend", "/api/traces/{request_id}"])
def test_money_is_documented_as_a_string_or_null(path: str) -> None:
    text = json.dumps({k: v for k, v in SCHEMA["components"]["schemas"].items() if k in ("RunSummary", "Spend", "TraceDetail", "CompareSide")})
    assert "dollars as a decimal string" in text
    assert "$ref" in answer_schema(path)
