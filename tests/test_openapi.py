"""The published /v1 contract (docs/openapi.json) must match the code."""
from __future__ import annotations

import json
from pathlib import Path

from marina.api import api

SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"


def test_committed_openapi_schema_matches_the_api():
    current = json.loads(json.dumps(api.get_openapi_schema(), sort_keys=True))
    committed = json.loads(SCHEMA.read_text())
    assert current == committed, (
        "docs/openapi.json is stale: run "
        "`python manage.py export_openapi_schema --api marina.api.api --indent 2 --sorted --output docs/openapi.json`"
    )


def test_schema_documents_chat_completions_and_models():
    paths = json.loads(SCHEMA.read_text())["paths"]
    assert "post" in paths["/v1/chat/completions"]
    body = paths["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["required"]) >= {"model", "messages"}
    assert "get" in paths["/v1/models"]
