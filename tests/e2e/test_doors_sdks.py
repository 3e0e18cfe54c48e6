"""Every door with the real, unmodified client libraries (openai, anthropic,
openai-agents, litellm) against a real gunicorn, with OpenAI, Anthropic and
Groq keyed on the scripted upstream (tests/scripted_providers.py: each answers
for its own models only, 404 for the others):

- the OpenAI Agents SDK's default model with a bare id reaches OpenAI while an
  Anthropic key is configured (and comes first in the provider order), and
  takes `<provider>/<model>` ids through its MultiProvider in `model_id` modes;
- an upstream's Retry-After reaches the client on every door, plain and streamed;
- the daily cap's refusal says when to come back and not to retry, and each
  client (LangChain's and pydantic-ai's chat models too) stops: one traced call per refused call (litellm as τ² calls it,
  num_retries=3, is the exception: its own loop ignores both headers, and
  only a retry policy, which repro_tau2 passes, stops it)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from repro.plan import RETRY_POLICY
from tests.conftest import MARINA_KEY
from tests.e2e.conftest import Servers
from tests.e2e.servers import Gunicorn
from tests.scripted_providers import ScriptedProviders
from tests.upstream import Reply, ScriptedUpstream, completion

pytestmark = pytest.mark.e2e

KEYS = {name: f"sk-{name}-e2e-provider-key-31415" for name in ("openai", "anthropic", "groq")}

if TYPE_CHECKING:
    import anthropic


def start(servers: Servers, upstream: ScriptedUpstream, **env: str) -> tuple[Gunicorn, ScriptedProviders]:
    """One worker with OpenAI, Anthropic and Groq keyed (and the test settings' OpenRouter), each answering as itself."""
    keyed: dict[str, str] = {}
    for name, key in KEYS.items():
        keyed[f"{name.upper()}_API_KEY"] = key
        keyed[f"MARINA_{name.upper()}_BASE_URL"] = upstream.base_url
    server = servers.start(workers=1, **keyed, **env)
    world = ScriptedProviders({key: name for name, key in KEYS.items()} | {"sk-or-test-provider-key-9876543210": "openrouter"})
    upstream.answer = world.answer
    return server, world


def openai_client(server: Gunicorn, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=MARINA_KEY, **kwargs)


def anthropic_client(server: Gunicorn, **kwargs: Any) -> anthropic.Anthropic:
    import anthropic  # here: at the top it would cost a second of the unit suite's collection too

    return anthropic.Anthropic(base_url=server.base_url, api_key=MARINA_KEY, **kwargs)


def run_agent(server: Gunicorn, model: str, provider: Any = None) -> str:
    """An Agent as the Agents SDK's README writes it: a model id string, resolved by its MultiProvider."""
    from agents import Agent, RunConfig, Runner, set_tracing_disabled
    from agents.models.multi_provider import MultiProvider

    set_tracing_disabled(True)  # the SDK's own trace export would go to OpenAI

    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key=MARINA_KEY) as client:
            agent = Agent(name="support", instructions="Help the user.", model=model)
            config = RunConfig(model_provider=provider(client) if provider else MultiProvider(openai_client=client))
            return str((await Runner.run(agent, "Who is u1?", run_config=config)).final_output)

    return asyncio.run(run())


def test_agents_sdk_reaches_openai_with_a_bare_id_beside_an_anthropic_key(servers, upstream):
    server, world = start(servers, upstream)
    assert run_agent(server, "gpt-4o-mini") == "Hi from Responses."
    # Tried as chat tries it: Anthropic first (translated: it has no /responses; 404), then OpenAI natively.
    assert world.seen == [("anthropic", "/v1/chat/completions", "gpt-4o-mini"), ("openai", "/v1/responses", "gpt-4o-mini")]
    [(status, route, spans)] = server.ledger.rows(
        "SELECT status, route, (SELECT COUNT(*) FROM ledger_span s WHERE s.trace_id = t.id) FROM ledger_trace t"
    )
    assert (status, route, spans) == ("ok", "passthru", 2)

    # <provider>/<model> ids: the SDK's MultiProvider reads `openai/` and any other prefix as its own
    # unless told to pass the id through whole (docs: README, "The other doors").
    from agents.models.multi_provider import MultiProvider

    def whole_ids(client: openai.AsyncOpenAI) -> MultiProvider:
        return MultiProvider(openai_client=client, openai_prefix_mode="model_id", unknown_prefix_mode="model_id")

    world.seen.clear()
    assert run_agent(server, "openai/gpt-4o-mini", whole_ids) == "Hi from Responses."
    assert run_agent(server, "groq/llama-3.3-70b", whole_ids) == "Hello from the scripted upstream."  # Groq's chat answer, translated
    assert world.seen == [("openai", "/v1/responses", "gpt-4o-mini"), ("groq", "/v1/chat/completions", "llama-3.3-70b")]


RATE_LIMITED = {"error": {"message": "Rate limit reached: try again in 20s.", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
ANTHROPIC_LIMITED = {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited."}}
HI = [{"role": "user", "content": "hi"}]


def door_calls(server: Gunicorn) -> dict[str, Callable[[], Any]]:
    """One call per door and mode, each by the client library that speaks it (no retries: the header is the point)."""
    oa, an = openai_client(server, max_retries=0), anthropic_client(server, max_retries=0)

    def messages_stream() -> None:
        with an.messages.stream(model="anthropic/claude-sonnet-4-5", max_tokens=16, messages=HI) as stream:
            stream.get_final_message()

    return {
        "chat": lambda: oa.chat.completions.create(model="openai/gpt-4o-mini", messages=HI),
        "chat, streamed": lambda: list(oa.chat.completions.create(model="openai/gpt-4o-mini", messages=HI, stream=True)),
        "responses": lambda: oa.responses.create(model="openai/gpt-4o-mini", input="hi"),
        "responses, streamed": lambda: list(oa.responses.create(model="openai/gpt-4o-mini", input="hi", stream=True)),
        "responses translated": lambda: oa.responses.create(model="groq/llama-3.3-70b", input="hi"),
        "responses translated, streamed": lambda: list(oa.responses.create(model="groq/llama-3.3-70b", input="hi", stream=True)),
        "embeddings": lambda: oa.embeddings.create(model="openai/text-embedding-3-small", input="hi"),
        "messages": lambda: an.messages.create(model="anthropic/claude-sonnet-4-5", max_tokens=16, messages=HI),
        "messages, streamed": messages_stream,
    }


def test_an_upstream_retry_after_reaches_the_client_on_every_door(servers, upstream):
    import anthropic

    server, world = start(servers, upstream)
    for door, call in door_calls(server).items():
        limited = ANTHROPIC_LIMITED if door.startswith("messages") else RATE_LIMITED
        upstream.script(Reply(status=429, json=limited, headers={"Retry-After": "20"}))
        with pytest.raises((openai.RateLimitError, anthropic.RateLimitError)) as caught:
            call()
        assert caught.value.response.headers.get("retry-after") == "20", door
        assert caught.value.response.status_code == 429, door
    assert len(upstream.requests) == 9 and not world.seen, "each door's one call, answered by the script"


def agent_frameworks(server: Gunicorn) -> dict[str, Callable[[], Any]]:
    """LangChain's and pydantic-ai's chat models, each as its README makes one (their default retries)."""
    from langchain_anthropic import ChatAnthropic
    from langchain_openai import ChatOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.anthropic import AnthropicProvider
    from pydantic_ai.providers.openai import OpenAIProvider

    v1, claude = f"{server.base_url}/v1", "anthropic/claude-sonnet-4-5"
    gpt = OpenAIChatModel("openai/gpt-4o-mini", provider=OpenAIProvider(base_url=v1, api_key=MARINA_KEY))
    sonnet = AnthropicModel(claude, provider=AnthropicProvider(base_url=server.base_url, api_key=MARINA_KEY))
    return {
        "langchain-openai": lambda: ChatOpenAI(model="openai/gpt-4o-mini", base_url=v1, api_key=MARINA_KEY).invoke("hi"),
        "langchain-anthropic": lambda: ChatAnthropic(
            model_name=claude, base_url=server.base_url, api_key=MARINA_KEY, max_tokens=16
        ).invoke("hi"),
        "pydantic-ai, openai": lambda: Agent(gpt).run_sync("hi"),
        "pydantic-ai, anthropic": lambda: Agent(sonnet).run_sync("hi"),
    }  # type: ignore[call-arg]


def test_the_caps_refusal_stops_every_client_at_one_call(servers, upstream, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches its price map at import otherwise
    server, _ = start(servers, upstream, MARINA_DAILY_SPEND_CAP_USD="0.001")
    refused = "SELECT COUNT(*) FROM ledger_trace WHERE error_kind = 'spend_cap_reached'"
    oa, an = openai_client(server), anthropic_client(server)  # the libraries' default retries (2 each)
    # Today's spend past the cap: one call estimated under it that cost more (the estimate's error).
    upstream.script(Reply(json=completion(cost=0.002)))
    oa.chat.completions.create(model="openrouter/openai/gpt-5.2", messages=HI, max_tokens=1)

    def litellm_call(**kwargs: Any) -> Any:
        import litellm

        return litellm.completion(model="openai/openai/gpt-4o-mini", messages=HI, api_base=f"{server.base_url}/v1",
                                  api_key=MARINA_KEY, **kwargs)  # fmt: skip

    clients: dict[str, tuple[Callable[[], Any], int]] = {
        "openai chat": (lambda: oa.chat.completions.create(model="openai/gpt-4o-mini", messages=HI), 1),
        "openai responses": (lambda: oa.responses.create(model="openai/gpt-4o-mini", input="hi"), 1),
        "openai embeddings": (lambda: oa.embeddings.create(model="openai/text-embedding-3-small", input="hi"), 1),
        "anthropic messages": (lambda: an.messages.create(model="anthropic/claude-sonnet-4-5", max_tokens=16, messages=HI), 1),
        "openai-agents": (lambda: run_agent(server, "gpt-4o-mini"), 1),
        **{name: (call, 1) for name, call in agent_frameworks(server).items()},
        "litellm": (litellm_call, 1),
        # τ²'s call: litellm's own loop (num_retries) retries any error at once, whatever the headers say,
        "litellm num_retries=3": (lambda: litellm_call(num_retries=3), 4),
        # unless a retry policy leaves 429s alone, as repro_tau2 gives τ² (and docs/tau2.md, its users).
        "litellm num_retries=3, the kit's retry policy": (lambda: litellm_call(num_retries=3, retry_policy=RETRY_POLICY), 1),
    }
    for name, (call, traced) in clients.items():
        before = server.ledger.one(refused)
        with pytest.raises(Exception) as caught:  # each library's own error type
            call()
            pytest.fail(f"{name} was not refused")
        assert "spend cap" in str(caught.value).lower(), (name, caught.value)
        # Each try is a trace: without x-should-retry the SDKs' two retries made three.
        assert server.ledger.one(refused) - before == traced, name
    assert len(upstream.requests) == 1, "nothing but the first call reached a provider"
    # What the clients read: the seconds to 00:00 UTC, and the SDKs' own word for "do not retry".
    answer = httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "openai/gpt-4o-mini", "messages": HI},
                        headers={"Authorization": f"Bearer {MARINA_KEY}"})  # fmt: skip
    assert answer.status_code == 429 and answer.headers["x-should-retry"] == "false"
    assert 0 < int(answer.headers["retry-after"]) <= 86_400
