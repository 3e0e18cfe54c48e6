"""POST /v1/responses with the real `openai` SDK and the OpenAI Agents SDK:
native to openai/openrouter, translated to chat completions for the others."""
from __future__ import annotations

import asyncio
import json

import openai
import pytest

from kernel.conversation import identify
from ledger.models import SpendDaily, Trace
from tests.conftest import MARINA_KEY
from tests.scripted_providers import ScriptedProviders
from tests.upstream import Reply, Sse, completion, sse_chunks, tool_call


def response_object(text: str = "Hi from Responses.", *, usage: dict | None = None, status: str = "completed") -> dict:
    return {
        "id": "resp_scripted", "object": "response", "created_at": 1700000000, "status": status,
        "error": None, "incomplete_details": None, "instructions": None, "model": "gpt-5.2",
        "output": [{
            "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }],
        "parallel_tool_calls": True, "temperature": 1.0, "tool_choice": "auto", "tools": [], "top_p": 1.0,
        "usage": usage or {
            "input_tokens": 200, "input_tokens_details": {"cached_tokens": 50},
            "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 10}, "total_tokens": 230, "cost": 0.00042,
        },
    }


def native_events(text: str = "Hello there") -> list[dict]:
    done = response_object(text)
    shell = {**done, "status": "in_progress", "output": [], "usage": None}
    item = done["output"][0]
    events = [
        {"type": "response.created", "response": shell},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
    ]
    events += [
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": piece}
        for piece in (text[:5], text[5:])
    ]
    events.append({"type": "response.completed", "response": done})
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


def test_native_plain_response_is_relayed_and_metered_from_the_providers_cost(openai_client, upstream, speakers):
    upstream.script(Reply(json=response_object()))
    raw = openai_client.responses.with_raw_response.create(
        model="openrouter/openai/gpt-5.2", input="ping", reasoning={"effort": "low"}, store=False
    )
    reply = raw.parse()
    assert reply.output_text == "Hi from Responses."
    sent = upstream.requests[0]
    assert sent.path == "/v1/responses"
    assert sent.body == {"model": "openai/gpt-5.2", "input": "ping", "reasoning": {"effort": "low"}, "store": False}
    assert raw.headers["x-marina-cost-usd"] == "0.00042000"
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert (trace.path, trace.route, trace.status) == ("/v1/responses", "passthru", "ok")
    span = trace.spans.get()
    assert (span.prompt_tokens, span.completion_tokens, span.cached_tokens, span.reasoning_tokens) == (200, 30, 50, 10)
    assert (span.cost_nanousd, span.cost_source) == (420_000, "provider")
    assert SpendDaily.objects.get().cost_nanousd == 420_000


def test_native_stream_is_relayed_event_for_event_and_metered_at_completed(openai_client, upstream, speakers):
    upstream.script(Sse(chunks=native_events(), usage=None, named=True, done=False))
    with openai_client.responses.stream(model="openrouter/openai/gpt-5.2", input="ping") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds == ["response.created", "response.output_item.added", "response.content_part.added",
                     "response.output_text.delta", "response.output_text.delta", "response.completed"]
    assert final.output_text == "Hello there" and final.usage.input_tokens == 200
    assert upstream.requests[0].body["stream"] is True and "stream_options" not in upstream.requests[0].body
    span = Trace.objects.get().spans.get()
    assert (span.prompt_tokens, span.completion_tokens, span.cost_nanousd) == (200, 30, 420_000)
    assert span.ttft_ms is not None
    assert Trace.objects.get().stream is True


def test_translated_plain_response_for_a_chat_only_provider(openai_client, upstream, speakers):
    upstream.script(Reply(json=completion("Translated hello", prompt_tokens=300, completion_tokens=40, cost=0.0005)))
    reply = openai_client.responses.create(
        model="groq/llama-3.3-70b", instructions="Be brief.", max_output_tokens=99, temperature=0.2,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    )
    assert reply.output_text == "Translated hello" and reply.status == "completed"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (300, 40)
    sent = upstream.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body == {
        "model": "llama-3.3-70b",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "temperature": 0.2,
        "max_tokens": 99,
    }
    trace = Trace.objects.get()
    assert trace.route == "passthru:translated"
    # The conversation's identity is chat's for the same conversation (τ² items link to traces by it).
    same = identify(sent.body)
    assert (trace.conv_opening, trace.conv_system) == (same.opening, same.system) and same.system
    assert trace.spans.get().cost_nanousd == 500_000 == SpendDaily.objects.get().cost_nanousd


def test_translated_stream_gives_the_responses_events(openai_client, upstream, speakers):
    upstream.script(Sse(chunks=sse_chunks("Streamed through chat."), usage={"prompt_tokens": 21, "completion_tokens": 6, "total_tokens": 27, "cost": 0.000011}))
    with openai_client.responses.stream(model="groq/llama-3.3-70b", input="hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Streamed through chat."
    assert final.output_text == "Streamed through chat."
    assert (final.usage.input_tokens, final.usage.output_tokens) == (21, 6)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert upstream.requests[0].body["stream_options"] == {"include_usage": True}
    span = Trace.objects.get().spans.get()
    assert (span.prompt_tokens, span.completion_tokens, span.cost_nanousd) == (21, 6, 11_000)


def test_translated_stream_tool_call_events(openai_client, upstream, speakers):
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    calls = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]},
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}}]},
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    upstream.script(Sse(chunks=calls))
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    with openai_client.responses.stream(model="groq/llama-3.3-70b", input="weather?", tools=tools) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    call = final.output[0]
    assert (call.type, call.name, call.call_id, json.loads(call.arguments)) == ("function_call", "get_weather", "call_9", {"city": "Oslo"})
    assert upstream.requests[0].body["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_formations_are_refused_naming_the_chat_door(openai_client, upstream, speakers):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.responses.create(model="marina/verify:openrouter/openai/gpt-5.2", input="hi")
    assert "/v1/chat/completions" in caught.value.message
    assert caught.value.body["param"] == "model"
    for model, headers in (("marina/lessons:groq/llama-3.3-70b", {}), ("groq/llama-3.3-70b", {"x-marina-obligations": "on"})):
        with pytest.raises(openai.BadRequestError) as caught:
            openai_client.responses.create(model=model, input="hi", extra_headers=headers)
        assert caught.value.code == "formation_not_supported"
    assert upstream.requests == []
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.responses.create(model="groq/llama-3.3-70b", input="hi", previous_response_id="resp_1")
    assert caught.value.body["param"] == "previous_response_id"


def _agent_run(marina_url: str, model: str, *, streamed: bool = False) -> tuple[str, list[str]]:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # the SDK's own trace export would go to OpenAI
    # The SDK's default model class, the Responses API's; given as an instance
    # because its provider lookup reads a `groq/` or `openrouter/` prefix as its own.
    openai_client = openai.AsyncOpenAI(base_url=f"{marina_url}/v1", api_key=MARINA_KEY, max_retries=0)
    asked: list[str] = []

    @function_tool
    def get_user_details(user_id: str) -> str:
        """Look a user up."""
        asked.append(user_id)
        return json.dumps({"user_id": user_id, "name": "Ada"})

    agent = Agent(
        name="support",
        instructions="Help the user.",
        model=OpenAIResponsesModel(model=model, openai_client=openai_client),
        tools=[get_user_details],
    )
    if not streamed:
        result = asyncio.run(Runner.run(agent, "Who is u1?"))
        return str(result.final_output), asked

    async def run_streamed() -> str:
        running = Runner.run_streamed(agent, "Who is u1?")
        async for _ in running.stream_events():
            pass
        return str(running.final_output)

    return asyncio.run(run_streamed()), asked


def test_agents_sdk_with_a_tool_through_the_translation(marina_url, upstream, speakers):
    upstream.script(
        Reply(json=completion(None, tool_calls=[tool_call("get_user_details", {"user_id": "u1"}, "call_7")], prompt_tokens=50, completion_tokens=9, cost=0.0001)),
        Reply(json=completion("u1 is Ada.", prompt_tokens=80, completion_tokens=5, cost=0.0002)),
    )
    output, asked = _agent_run(marina_url, "groq/llama-3.3-70b")
    assert (output, asked) == ("u1 is Ada.", ["u1"])
    second = upstream.requests[1].body["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_7"
    assert second[-1] == {"role": "tool", "tool_call_id": "call_7", "content": '{"user_id": "u1", "name": "Ada"}'}
    assert sum(s.cost_nanousd for t in Trace.objects.all() for s in t.spans.all()) == 300_000
    assert SpendDaily.objects.get().cost_nanousd == 300_000


def test_agents_sdk_with_a_tool_natively(marina_url, upstream, speakers):
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_3", "name": "get_user_details",
            "arguments": '{"user_id": "u1"}', "status": "completed"}
    upstream.script(Reply(json={**response_object(), "output": [call]}), Reply(json=response_object("u1 is Ada.")))
    output, asked = _agent_run(marina_url, "openrouter/openai/gpt-5.2")
    assert (output, asked) == ("u1 is Ada.", ["u1"])
    assert [r.path for r in upstream.requests] == ["/v1/responses", "/v1/responses"]
    outputs = [i for i in upstream.requests[1].body["input"] if i.get("type") == "function_call_output"]
    assert outputs[0]["call_id"] == "call_3"
    assert SpendDaily.objects.get().cost_nanousd == 840_000


def test_agents_sdk_streamed_with_a_tool_through_the_translation(marina_url, upstream, speakers):
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    call = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_5", "type": "function", "function": {"name": "get_user_details", "arguments": ""}}]}}]},
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"user_id": "u1"}'}}]}}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    upstream.script(
        Sse(chunks=call, usage={"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59, "cost": 0.0001}),
        Sse(chunks=sse_chunks("u1 is Ada."), usage={"prompt_tokens": 80, "completion_tokens": 5, "total_tokens": 85, "cost": 0.0002}),
    )
    output, asked = _agent_run(marina_url, "groq/llama-3.3-70b", streamed=True)
    assert (output, asked) == ("u1 is Ada.", ["u1"])
    assert upstream.requests[1].body["messages"][-1]["tool_call_id"] == "call_5"
    assert SpendDaily.objects.get().cost_nanousd == 300_000


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_bare_id_is_tried_on_every_provider_as_on_chat(openai_client, upstream, speakers, stream):
    """gpt-4o-mini answered 404 "tried anthropic, groq": only the first provider's kind was kept."""
    world = ScriptedProviders({c["api_key"]: n for n, c in speakers.MARINA_PROVIDERS.items() if c["api_key"]})
    upstream.answer = world.answer
    if stream:
        with openai_client.responses.stream(model="gpt-4o-mini", input="ping") as events:
            text = events.get_final_response().output_text
    else:
        text = openai_client.responses.create(model="gpt-4o-mini", input="ping").output_text
    assert text == "Hi from Responses."
    # Anthropic first (as a chat completion: it has no /responses), then OpenAI natively.
    assert world.seen == [("anthropic", "/v1/chat/completions", "gpt-4o-mini"), ("openai", "/v1/responses", "gpt-4o-mini")]
    trace = Trace.objects.get()
    assert (trace.route, trace.status, trace.stream) == ("passthru", "ok", stream)
    assert [(s.provider, s.http_status) for s in trace.spans.order_by("seq")] == [("anthropic", 404), ("openai", 200)]


def test_a_bare_id_goes_translated_to_the_provider_that_knows_it(openai_client, upstream, speakers):
    world = ScriptedProviders({c["api_key"]: n for n, c in speakers.MARINA_PROVIDERS.items() if c["api_key"]})
    upstream.answer = world.answer
    assert openai_client.responses.create(model="llama-3.3-70b", input="ping").output_text == "Hello from the scripted upstream."
    assert [(p, path) for p, path, _ in world.seen] == [
        ("anthropic", "/v1/chat/completions"), ("openai", "/v1/responses"), ("groq", "/v1/chat/completions"),
    ]
    assert Trace.objects.get().route == "passthru:translated"


def test_what_only_the_responses_api_has_goes_to_the_providers_that_speak_it(openai_client, upstream, speakers):
    """previous_response_id cannot be put as a chat completion: a bare id skips the others, not the request."""
    world = ScriptedProviders({c["api_key"]: n for n, c in speakers.MARINA_PROVIDERS.items() if c["api_key"]})
    upstream.answer = world.answer
    reply = openai_client.responses.create(model="gpt-4o-mini", input="and then?", previous_response_id="resp_1")
    assert reply.output_text == "Hi from Responses."
    assert world.seen == [("openai", "/v1/responses", "gpt-4o-mini")]
    assert upstream.requests[0].body["previous_response_id"] == "resp_1"
