"""The /v1 body rules are stated once (passthru/schemas.py) and checked by hand
(passthru.doors.chat.parse_body, faster than validating the model): every rule of
the published schema (ChatCompletionRequest, docs/openapi.json) has a
parse_body twin, so the two give the same verdict on every probe, and
parse_body's 400 names the field."""
from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from passthru.doors.chat import parse_body
from passthru.errors import ApiError
from passthru.schemas import MAX_MODEL_CHARS, TYPED_FIELDS, ChatCompletionRequest, inline_schema

VALID: dict[str, Any] = {"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}]}
SCHEMA = inline_schema(ChatCompletionRequest)
# The schema keywords the probes below cover; a rule of another kind needs probes (and a twin) first.
KNOWN = {"type", "anyOf", "items", "minLength", "maxLength", "pattern", "minItems", "properties", "required",
         "additionalProperties", "title", "description", "examples", "default"}

# Values of every JSON type, blanks, and each kind of character the model id must not hold.
PALETTE: list[Any] = [
    None, True, False, 0, 2, -1, 2.0, 2.5, "", " ", "\t", "x", "2", "true", [], {}, [{}], [1], ["x"],
    {"role": "user"}, [{"role": "user"}], [{"role": 5}], [{"content": "no role"}], [{"role": "user"}, "x"],
    "a\x00b", "a\x1fb", "a\x7fb", "a\x85b", "a\x9fb", "a\u2028b", "a\u2029b", "\x01", " a", "a ", "é/ü",
]


def keywords(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = set(node)
        for key, value in node.items():
            if key in ("properties",):
                for sub in value.values():
                    found |= keywords(sub)
            elif key not in ("examples", "default"):
                found |= keywords(value)
        return found
    if isinstance(node, list):
        return set().union(*(keywords(v) for v in node)) if node else set()
    return set()


def probes(field: str) -> list[Any]:
    """The palette, and values at and past each length limit the schema states for the field."""
    spec = SCHEMA["properties"][field]
    extra: list[Any] = []
    for variant in [spec, *spec.get("anyOf", [])]:
        if "maxLength" in variant:
            extra += ["a" * variant["maxLength"], "a" * (variant["maxLength"] + 1)]
        if "minLength" in variant:
            extra += ["a" * max(0, variant["minLength"] - 1), "a" * variant["minLength"]]
        if "minItems" in variant:
            extra += [[{"role": "user"}] * max(0, variant["minItems"] - 1)]
    return PALETTE + extra


def schema_accepts(body: dict[str, Any]) -> bool:
    try:
        ChatCompletionRequest.model_validate_json(json.dumps(body), strict=True)
    except ValidationError:
        return False
    return True


def parse_body_verdict(body: dict[str, Any]) -> str | None:
    """None if accepted, else the param its 400 names."""
    try:
        parse_body(json.dumps(body).encode())
    except ApiError as exc:
        assert exc.status == 400
        return exc.param or ""
    return None


def test_the_schema_states_no_rule_the_probes_do_not_cover():
    assert keywords(SCHEMA) <= KNOWN, keywords(SCHEMA) - KNOWN


def test_the_schema_and_parse_body_share_their_limits():
    assert SCHEMA["properties"]["model"]["maxLength"] == MAX_MODEL_CHARS
    typed = {name for name, spec in SCHEMA["properties"].items() if name not in SCHEMA["required"]}
    assert typed == set(TYPED_FIELDS)


@pytest.mark.parametrize("field", sorted(SCHEMA["properties"]))
def test_every_schema_rule_has_a_parse_body_twin(field):
    disagreements = []
    for value in probes(field):
        body = {**VALID, field: value}
        by_schema, param = schema_accepts(body), parse_body_verdict(body)
        if by_schema != (param is None):
            disagreements.append((value, "schema accepts" if by_schema else "schema refuses", param))
        elif param is not None:
            assert param == field or param.startswith(f"{field}["), (value, param)
    assert not disagreements, disagreements


@pytest.mark.parametrize("field", sorted(SCHEMA["required"]))
def test_a_missing_required_field_is_refused_by_both(field):
    body = {k: v for k, v in VALID.items() if k != field}
    assert not schema_accepts(body)
    assert parse_body_verdict(body) == field
