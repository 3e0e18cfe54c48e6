"""The fallback loop: try a Plan's routes in order until one serves the call.

Each attempt is its own metered, traced upstream call (one span each). An
attempt is passed over when the provider does not know the model (a 404, the
way Anthropic says "not this provider", or a 400/422 naming the model as
unknown) or could not answer (transport failure, 401/403/408/429, 5xx). Any
other answer is final: a 2xx, or a 4xx about the request itself, which the
next provider would refuse too.

When nobody served the call: 404 model_not_found if every provider said it
does not know the model, else 502 naming what each attempt got."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from passthru.calls import Completion, call_json, encode
from passthru.context import RequestContext
from passthru.errors import ApiError, UpstreamError
from passthru.providers import Plan, Route

# An unknown model, as providers word it in a 400/422 (OpenAI and Groq say 404;
# OpenRouter "x is not a valid model ID", Mistral "Invalid model", DeepSeek "Model Not Exist").
_UNKNOWN_MODEL = re.compile(
    rb"model_not_found|invalid model|not a valid model|model not exist|unknown model|no such model|"
    rb"model[^\"]{0,80}(?:not found|does not exist|is not supported|not available)",
    re.IGNORECASE,
)
_PROVIDER_FAILED = frozenset({401, 403, 408, 429})

SERVED, NOT_HERE, FAILED = "served", "not_here", "failed"


def outcome(status: int, body: bytes) -> str:
    """What an upstream reply means for the loop."""
    if status == 404 or (status in (400, 422) and _UNKNOWN_MODEL.search(body[:4096])):
        return NOT_HERE
    if status in _PROVIDER_FAILED or status >= 500:
        return FAILED
    return SERVED  # a 2xx, or the request's own fault: final


@dataclass
class Misses:
    """The attempts passed over so far."""

    plan: Plan
    said: list[tuple[str, str]]

    def add(self, route: Route, what: str) -> None:
        self.said.append((route.provider.name, what))

    def exhausted(self) -> ApiError:
        tried = ", ".join(f"{name}: {what}" for name, what in self.said)
        if all(what == "not found" for _, what in self.said):
            return ApiError(
                404,
                f"No configured provider serves the model '{self.plan.requested}' (tried {tried}).",
                code="model_not_found",
                param="model",
            )
        return UpstreamError(
            "fallback",
            "no_provider",
            f"No configured provider served the model '{self.plan.requested}' ({tried}).",
        )


class Bodies:
    """The body of each attempt of a plan, the parsed dict not held while a
    call waits for its provider: a streamed call may wait minutes for a
    reasoning model's first byte, with thousands waiting in one worker
    (docs/performance.md, issue 45). The first attempt gets the dict itself;
    when more may follow, one compact copy (the JSON: ~20 KB for an agent's
    turn, against ~50 KB as a dict) is kept to parse again for them, until
    the caller is done with the plan."""

    def __init__(self, body: dict[str, Any], plan: Plan) -> None:
        self._first: dict[str, Any] | None = body
        # Copied to fit: orjson's bytes sit in the buffer it grew (64 KB for 19 KB of JSON).
        self._json = memoryview(encode(body)).tobytes() if plan.fallback and len(plan.routes) > 1 else None

    def next(self) -> dict[str, Any]:
        """The body for the next attempt (the dict is the caller's to drop)."""
        if self._first is not None:
            body, self._first = self._first, None
            return body
        if self._json is None:
            raise RuntimeError("a plan without fallback has one attempt")
        again: dict[str, Any] = json.loads(self._json)
        return again


def describe(status: int, body: bytes) -> str:
    return "not found" if outcome(status, body) == NOT_HERE else f"HTTP {status}"


def describe_failure(exc: UpstreamError) -> str:
    return exc.kind


async def call_first(ctx: RequestContext, plan: Plan, body: dict[str, Any]) -> tuple[Route, Completion]:
    """A non-streaming call served by the first route of `plan` that serves it."""
    if not plan.fallback:
        route = plan.routes[0]
        return route, await call_json(ctx, route, body)
    misses = Misses(plan, [])
    for route in plan.routes:
        try:
            done = await call_json(ctx, route, body)
        except UpstreamError as exc:
            misses.add(route, describe_failure(exc))
            continue
        if outcome(done.status, done.body) == SERVED:
            return route, done
        misses.add(route, describe(done.status, done.body))
    raise misses.exhausted()
