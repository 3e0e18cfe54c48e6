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


def test_schema_documents_each_door_with_its_own_error_envelope():
    paths = json.loads(SCHEMA.read_text())["paths"]
    for path, required in (
        ("/v1/responses", {"model", "input"}),
        ("/v1/embeddings", {"model", "input"}),
        ("/v1/messages", {"model", "messages", "max_tokens"}),
    ):
        operation = paths[path]["post"]
        assert set(operation["requestBody"]["content"]["application/json"]["schema"]["required"]) == required
    error = paths["/v1/messages"]["post"]["responses"]["401"]["content"]["application/json"]["schema"]["$ref"]
    assert error.endswith("/AnthropicErrorEnvelope")
    assert paths["/v1/responses"]["post"]["responses"]["401"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorEnvelope")
    assert "text/event-stream" in paths["/v1/responses"]["post"]["responses"]["200"]["content"]
    assert "text/event-stream" not in paths["/v1/embeddings"]["post"]["responses"]["200"].get("content", {})
