"""Marina's traces in a real Arize Phoenix (tests/e2e/phoenix.py): a real gunicorn
exports to Phoenix's OTLP/HTTP receiver, and what Phoenix's own APIs give back
reads right: one LLM span per upstream call (the request is a CHAIN, not a
second LLM call), a formation's calls named by step, token counts equal to the
provider's usage, and Marina's billed cost on every call."""
from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.conftest import find_secrets
from tests.e2e.phoenix import Phoenix, start_phoenix
from tests.otlp_receiver import wait_for
from tests.passthru.formations.verify.test_formation import (
    CONFIRM_TEXT,
    MESSAGES,
    TOOLS,
    draft_cancel,
    play,
    revise,
    text,
)
from tests.passthru.formations.verify.test_formation import MODEL as VERIFY
from tests.scripted_providers import ScriptedProviders
from tests.upstream import Reply, completion

pytestmark = pytest.mark.e2e

PLAIN = "openrouter/openai/gpt-5.2"  # a model Phoenix has a price for (its estimate is not Marina's bill)
MISTRAL = "mistral/mistral-small-latest"  # a provider whose OpenInference name differs from its GenAI one
PROJECT = "marina-e2e"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    server = start_phoenix(tmp_path_factory.mktemp("phoenix"))
    try:
        yield server
    finally:
        server.stop()


SPANS_QUERY = """
query ($project: String!) {
  getProjectByName(name: $project) {
    traceCount tokenCountPrompt tokenCountCompletion
    spans(first: 1000) { edges { node {
      name spanKind parentId attributes
      context { traceId spanId }
      tokenCountPrompt tokenCountCompletion tokenCountTotal
      cumulativeTokenCountPrompt cumulativeTokenCountCompletion
      costSummary { prompt { tokens cost } completion { tokens cost } total { tokens cost } }
    } } }
  }
}
"""


def phoenix_project(phoenix: Phoenix) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Phoenix's totals for the project and its spans, from its GraphQL API (what its pages show)."""
    project = phoenix.graphql(SPANS_QUERY, project=PROJECT)["getProjectByName"]
    return project, [edge["node"] for edge in project.pop("spans")["edges"]]


def by_trace(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["context"]["traceId"], []).append(span)
    return traces


def test_phoenix_reads_marinas_calls_tokens_and_billed_cost(servers, upstream, phoenix):
    server = servers.start(
        workers=1,
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.base_url,  # the SDK adds /v1/traces: Phoenix's OTLP/HTTP receiver
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={PROJECT}",  # Phoenix's project
        OTEL_BSP_SCHEDULE_DELAY="100",
        MARINA_MISTRAL_BASE_URL=upstream.base_url,  # a second provider, on the same scripted upstream
    )
    ledger = server.ledger
    assert ledger is not None
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=MARINA_KEY, max_retries=0)

    # A plain call, billed $0.00012 by the provider (Phoenix's price list says $0.00686 for these tokens).
    upstream.script(Reply(json=completion("ok", prompt_tokens=1200, completion_tokens=340, cost=0.00012)))
    plain = client.chat.completions.with_raw_response.create(model=PLAIN, messages=[{"role": "user", "content": "hi"}])
    upstream.script(Reply(json=completion("bonjour", prompt_tokens=9, completion_tokens=4, cost=0.0000031)))
    mistral = client.chat.completions.with_raw_response.create(model=MISTRAL, messages=[{"role": "user", "content": "salut"}])
    # A verify formation: draft, review, revision (three upstream calls under one request).
    upstream.reset()
    play(upstream, draft=draft_cancel(), checker=revise(), revision=text(CONFIRM_TEXT))
    formed = client.chat.completions.with_raw_response.create(model=VERIFY, messages=MESSAGES, tools=TOOLS)
    assert len(upstream.requests) == 3
    answers = {r.headers["x-request-id"]: r for r in (plain, mistral, formed)}
    expected_spans = 2 + 2 + 6  # request + call; request + call; request, verify, lessons, 3 calls

    wait_for(lambda: len(phoenix.spans(PROJECT)) >= expected_spans, "every span in Phoenix", timeout=60)
    rest = phoenix.spans(PROJECT)  # REST: span_kind and the attributes as Phoenix stored them
    assert len(rest) == expected_spans, "each span once"
    project, found = phoenix_project(phoenix)  # GraphQL: kinds, token counts and Phoenix's cost figures
    assert {s["context"]["spanId"]: s["spanKind"] for s in found} == {
        s["context"]["span_id"]: s["span_kind"].lower() for s in rest
    }, "the REST and GraphQL APIs agree"
    traces = by_trace(found)
    assert len(traces) == project["traceCount"] == 3
    # The project's token totals are the provider's usage, each call counted once.
    assert (project["tokenCountPrompt"], project["tokenCountCompletion"]) == (1200 + 9 + 200 + 300 + 250, 340 + 4 + 20 + 40 + 15)

    for spans in traces.values():
        [root] = [s for s in spans if s["parentId"] is None]
        root_attrs = json.loads(root["attributes"])
        answer = answers[root_attrs["marina"]["request_id"]]
        calls = [s for s in spans if s["spanKind"] == "llm"]
        # The request is a CHAIN with no model nor tokens of its own: Phoenix counts each call once.
        assert (root["name"], root["spanKind"]) == ("POST /v1/chat/completions", "chain")
        assert "llm" not in root_attrs and root["tokenCountTotal"] == 0 and root["costSummary"] is None
        upstream_calls = [s for s in ledger.spans_of(answer.headers["x-request-id"]) if s["provider"]]
        assert len(calls) == len(upstream_calls) == root_attrs["marina"]["calls"], "one LLM span per upstream call"
        assert all(s["spanKind"] in {"chain", "llm", "retriever"} for s in spans), "every span has its kind"
        # Marina's billed cost is on every call; the calls add up to the x-marina-cost-usd header.
        billed = [Decimal(str(json.loads(s["attributes"])["llm"]["cost"]["total"])) for s in calls]
        assert sum(billed) == Decimal(answer.headers["x-marina-cost-usd"])
        # Phoenix's cumulative counts on the request are its calls' (nothing counted twice) and Marina's.
        assert root["cumulativeTokenCountPrompt"] == sum(s["tokenCountPrompt"] for s in calls) == root_attrs["marina"]["usage"]["input_tokens"]
        assert root["cumulativeTokenCountCompletion"] == sum(s["tokenCountCompletion"] for s in calls)

    def trace_of(answer: Any) -> list[dict[str, Any]]:
        rid = answer.headers["x-request-id"]
        return next(t for t in traces.values() if any(json.loads(s["attributes"]).get("marina", {}).get("request_id") == rid for s in t))

    [call] = [s for s in trace_of(plain) if s["spanKind"] == "llm"]
    attrs = json.loads(call["attributes"])
    assert call["name"] == "chat openai/gpt-5.2"
    assert (call["tokenCountPrompt"], call["tokenCountCompletion"], call["tokenCountTotal"]) == (1200, 340, 1540)
    assert attrs["llm"]["cost"]["total"] == 0.00012 and plain.headers["x-marina-cost-usd"] == "0.00012000"
    assert (attrs["llm"]["model_name"], attrs["llm"]["provider"]) == ("openai/gpt-5.2", "openrouter")
    # Phoenix 20.26's own cost figures are its price list times the tokens (gpt-5.2: $1.75 / $14 per
    # million): it does not read llm.cost.*, so its cost column is not Marina's bill.
    assert call["costSummary"]["total"]["cost"] == pytest.approx(1200 * 1.75e-6 + 340 * 14e-6)

    [call] = [s for s in trace_of(mistral) if s["spanKind"] == "llm"]
    attrs = json.loads(call["attributes"])
    # OpenInference's provider value (`mistralai`), which Phoenix matches its price list by.
    assert (attrs["llm"]["model_name"], attrs["llm"]["provider"]) == ("mistral-small-latest", "mistralai")
    assert attrs["gen_ai"]["provider"]["name"] == "mistral_ai"
    assert attrs["llm"]["cost"]["total"] == 0.0000031

    formation = trace_of(formed)
    named = {s["name"]: s for s in formation}
    assert {name: s["spanKind"] for name, s in named.items()} == {
        "POST /v1/chat/completions": "chain",
        "verify": "chain",
        "lessons": "retriever",
        "verify.draft": "llm",
        "verify.review": "llm",
        "verify.revision": "llm",
    }
    verify_id = named["verify"]["context"]["spanId"]
    for step, (prompt, completion_tokens, cost) in {
        "verify.draft": (200, 20, 0.001),
        "verify.review": (300, 40, 0.0004),
        "verify.revision": (250, 15, 0.002),
    }.items():
        span = named[step]
        assert span["parentId"] == verify_id, step
        assert (span["tokenCountPrompt"], span["tokenCountCompletion"]) == (prompt, completion_tokens), step
        assert json.loads(span["attributes"])["llm"]["cost"]["total"] == cost, step
        assert span["costSummary"]["total"]["cost"] is None, "a model Phoenix has no price for: no estimate"
    assert formed.headers["x-marina-cost-usd"] == "0.00340000"
    assert json.loads(named["POST /v1/chat/completions"]["attributes"])["marina"]["formation"] == {"name": "verify", "decision": "revised"}
    assert not find_secrets(json.dumps(rest)), "no key reaches Phoenix"


def test_phoenix_shows_each_door_by_name_and_embeddings_as_embeddings(servers, upstream, phoenix):
    """The other doors' requests were `POST` and an embeddings call an LLM span named `chat …`."""
    project = "marina-e2e-doors"
    keys = {"openai": "sk-openai-phoenix-provider-27182", "anthropic": "sk-anthropic-phoenix-provider-27182"}
    server = servers.start(
        workers=1,
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.base_url,
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        OTEL_BSP_SCHEDULE_DELAY="100",
        **{f"{name.upper()}_API_KEY": key for name, key in keys.items()},
        **{f"MARINA_{name.upper()}_BASE_URL": upstream.base_url for name in keys},
    )
    upstream.answer = ScriptedProviders({key: name for name, key in keys.items()}).answer
    auth = {"Authorization": f"Bearer {MARINA_KEY}"}
    calls = {
        "/v1/embeddings": ("openai/text-embedding-3-small", {"input": ["one", "two"]}),
        "/v1/responses": ("openai/gpt-4o-mini", {"input": "hi"}),
        "/v1/messages": ("anthropic/claude-sonnet-4-5", {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
    }
    for path, (model, body) in calls.items():
        assert httpx.post(f"{server.base_url}{path}", json={"model": model, **body}, headers=auth).status_code == 200

    wait_for(lambda: len(phoenix.spans(project)) >= 6, "every span in Phoenix", timeout=60)
    spans = [edge["node"] for edge in phoenix.graphql(SPANS_QUERY, project=project)["getProjectByName"]["spans"]["edges"]]
    assert len(spans) == 6, "each request and its one call, once"
    roots = {s["context"]["traceId"]: s for s in spans if s["parentId"] is None}
    assert sorted((s["name"], s["spanKind"]) for s in roots.values()) == [
        ("POST /v1/embeddings", "chain"), ("POST /v1/messages", "chain"), ("POST /v1/responses", "chain"),
    ]
    calls = {roots[s["context"]["traceId"]]["name"]: s for s in spans if s["parentId"] is not None}
    embedding = calls["POST /v1/embeddings"]
    assert (embedding["name"], embedding["spanKind"]) == ("embeddings text-embedding-3-small", "embedding")
    attrs = json.loads(embedding["attributes"])
    assert attrs["embedding"]["model_name"] == "text-embedding-3-small"
    assert attrs["gen_ai"]["operation"]["name"] == "embeddings"
    # The provider's usage, as an attribute: Phoenix 20.26 counts tokens (and prices them) on LLM spans only.
    assert attrs["llm"]["token_count"]["prompt"] == 8 and embedding["tokenCountPrompt"] is None
    assert {(calls[d]["name"], calls[d]["spanKind"]) for d in ("POST /v1/responses", "POST /v1/messages")} == {
        ("chat gpt-4o-mini", "llm"), ("chat claude-sonnet-4-5", "llm"),
    }
