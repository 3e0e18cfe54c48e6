"""`marina:<crew>`: crews made in the Django admin (its real forms, through
Django's test client) and then served by name to the openai SDK by Marina
in-process, against the scripted upstream."""
from __future__ import annotations

import re
from typing import Any

import openai
import pytest
from django.test import Client
from django.urls import reverse

from ledger.models import SpendDaily, Trace
from passthru.models import Crew
from tests.passthru.formations.play import OPENING, TOOLS, Play, json_reply, text
from tests.upstream import Reply, completion

EXTRA = "Always answer in English."


def create_in_admin(admin: Client, **fields: Any) -> Any:
    form = {"name": "", "description": "", "model_id": "", "system_text": "", "reasoning_effort": "", "enabled": "on", **fields}
    if form["enabled"] is False:
        del form["enabled"]
    return admin.post(reverse("admin:passthru_crew_add"), form)


def form_errors(response: Any) -> str:
    return " ".join(re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S))


def test_a_crew_made_in_the_admin_is_served_by_name(admin_client: Client, openai_client: openai.OpenAI, upstream) -> None:
    made = create_in_admin(
        admin_client, name="support", description="Airline support desk", model_id="openrouter/openai/gpt-5.2",
        system_text=EXTRA, reasoning_effort="low",
    )  # fmt: skip
    assert made.status_code == 302, form_errors(made)
    upstream.script(Reply(json=completion("Hello.", cost=0.0002)))

    raw = openai_client.chat.completions.with_raw_response.create(model="marina:support", messages=OPENING)

    assert raw.parse().choices[0].message.content == "Hello."
    sent = upstream.requests[0].body
    assert sent["model"] == "openai/gpt-5.2"
    # The caller's system message stays first, byte for byte; the crew's text follows it.
    assert sent["messages"] == [OPENING[0], {"role": "system", "content": EXTRA}, OPENING[1]]
    assert sent["reasoning_effort"] == "low"
    assert raw.headers["x-marina-upstream-model"] == "openrouter/openai/gpt-5.2"
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert (trace.requested_model, trace.route, trace.status) == ("marina:support", "passthru", "ok")
    crew_span, call = trace.spans.order_by("seq")
    assert crew_span.name == "crew"
    assert crew_span.detail == {"crew": "support", "model_id": "openrouter/openai/gpt-5.2", "applied": ["system_text", "reasoning_effort"]}
    assert (call.provider, call.upstream_model, call.cost_nanousd) == ("openrouter", "openai/gpt-5.2", 200_000)
    assert SpendDaily.objects.get().requested_model == "marina:support"


def test_the_callers_effort_wins_and_no_system_message_means_the_crews_comes_first(openai_client, upstream) -> None:
    Crew.objects.create(name="desk", model_id="openrouter/agent", system_text=EXTRA, reasoning_effort="high")
    openai_client.chat.completions.create(model="marina:desk", messages=[OPENING[1]], reasoning_effort="minimal")
    sent = upstream.requests[0].body
    assert sent["reasoning_effort"] == "minimal"
    assert sent["messages"] == [{"role": "system", "content": EXTRA}, OPENING[1]]
    assert Trace.objects.get().spans.get(name="crew").detail["applied"] == ["system_text"]


def test_a_crew_without_defaults_sends_the_callers_body_unchanged(openai_client, upstream) -> None:
    Crew.objects.create(name="bare", model_id="openrouter/agent")
    openai_client.chat.completions.create(model="marina:bare", messages=OPENING, tools=TOOLS)
    openai_client.chat.completions.create(model="openrouter/agent", messages=OPENING, tools=TOOLS)
    via_crew, direct = upstream.requests
    assert via_crew.raw == direct.raw


@pytest.mark.parametrize("model", ["marina:nobody", "marina:off-duty", "marina:"])
def test_unknown_or_disabled_crews_are_a_404(openai_client, upstream, model: str) -> None:
    Crew.objects.create(name="off-duty", model_id="openrouter/agent", enabled=False)
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client.chat.completions.create(model=model, messages=OPENING)
    error = caught.value.body
    assert (error["code"], error["type"], error["param"]) == ("model_not_found", "not_found_error", "model")
    assert f"The crew '{model}' does not exist or is disabled" in error["message"]
    assert upstream.requests == []
    trace = Trace.objects.get()
    assert (trace.http_status, trace.error_kind, trace.requested_model) == (404, "model_not_found", model)


def test_disabling_in_the_admin_stops_serving_at_once(admin_client: Client, openai_client, upstream) -> None:
    crew = Crew.objects.create(name="night", model_id="openrouter/agent")
    openai_client.chat.completions.create(model="marina:night", messages=OPENING)
    response = admin_client.post(
        reverse("admin:passthru_crew_changelist"), {"action": "disable", "_selected_action": [crew.pk]}
    )
    assert response.status_code == 302
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(model="marina:night", messages=OPENING)
    assert len(upstream.requests) == 1


def test_editing_in_the_admin_holds_from_the_next_request(admin_client: Client, openai_client, upstream) -> None:
    crew = Crew.objects.create(name="swap", model_id="openrouter/first")
    openai_client.chat.completions.create(model="marina:swap", messages=OPENING)
    edited = admin_client.post(
        reverse("admin:passthru_crew_change", args=[crew.pk]),
        {"name": "swap", "description": "", "model_id": "openrouter/second", "system_text": "", "reasoning_effort": "", "enabled": "on"},
    )
    assert edited.status_code == 302, form_errors(edited)
    openai_client.chat.completions.create(model="marina:swap", messages=OPENING)
    assert [r.body["model"] for r in upstream.requests] == ["first", "second"]


def test_a_crew_serves_a_stack_around_verify(openai_client, upstream) -> None:
    Crew.objects.create(
        name="careful", model_id="marina/obligations:marina/verify:openrouter/agent+openrouter/checker", system_text=EXTRA
    )
    play = Play(upstream, extract=json_reply({"add": [], "cancel": []}), main=text("Noted."), review=json_reply({"verdict": "approve"}))
    raw = openai_client.chat.completions.with_raw_response.create(
        model="marina:careful", messages=OPENING, tools=TOOLS, extra_headers={"x-marina-session": "crew-1"}
    )
    assert play.calls == ["extract", "main", "review"]
    assert play.bodies["main"][0]["messages"][1] == {"role": "system", "content": EXTRA}
    assert raw.headers["x-marina-verify"] == "approved" and raw.headers["x-marina-obligations"].startswith("on;")
    assert raw.parse().model == "marina:careful"
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert trace.route == "obligations+verify" and trace.requested_model == "marina:careful"
    assert [s.name for s in trace.spans.order_by("seq")][:2] == ["crew", "obligations+verify"]


def test_models_lists_every_enabled_crew(openai_client, upstream) -> None:
    Crew.objects.create(name="alpha", model_id="openrouter/agent")
    Crew.objects.create(name="beta", model_id="marina/verify:openrouter/agent")
    Crew.objects.create(name="gamma", model_id="openrouter/agent", enabled=False)
    openai_client.chat.completions.create(model="marina:alpha", messages=OPENING)
    Crew.objects.filter(name="alpha").update(enabled=False)  # served lately, disabled since
    listed = {m.id: m.owned_by for m in openai_client.models.list()}
    assert listed["marina:beta"] == "marina"
    assert "marina:gamma" not in listed and "marina:alpha" not in listed
    assert not any("<" in model_id for model_id in listed), "only callable ids, no templates"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"name": "x", "model_id": "marina:other"}, "a crew cannot serve another crew"),
        ({"name": "x", "model_id": "marina/argcheck:nowhere/model"}, "Marina cannot serve this id"),
        ({"name": "x", "model_id": "marina/obligations:marina:other"}, "cannot be wrapped there"),
        ({"name": "x", "model_id": "marina/verify:openrouter/a+"}, "a model is missing: give one after each prefix"),
        ({"name": "x", "model_id": "marina/verify:"}, "a model is missing"),
        ({"name": "x", "model_id": "marina/obligations:"}, "a model is missing"),
        ({"name": "default", "model_id": "openrouter/agent"}, "the default model"),
        ({"name": "Bad Name", "model_id": "openrouter/agent"}, "Lower-case letters"),
        ({"name": "x", "model_id": "openrouter/agent", "reasoning_effort": "extreme"}, "Select a valid choice"),
    ],
)
def test_the_admin_refuses_what_cannot_be_served(admin_client: Client, marina_config, fields, says) -> None:
    response = create_in_admin(admin_client, **fields)
    assert response.status_code == 200
    assert says in form_errors(response)
    assert not Crew.objects.exists()


def test_the_admin_lists_crews_with_their_served_id(admin_client: Client, db) -> None:
    Crew.objects.create(name="listed", model_id="openrouter/agent", description="Shown")
    html = admin_client.get(reverse("admin:passthru_crew_changelist")).content.decode()
    assert "marina:listed" in html and "openrouter/agent" in html
