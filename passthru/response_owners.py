"""Which key made a Responses answer, for the next call's `previous_response_id`
(issue 42 C2).

Every key's calls go to a provider under one provider key: without this,
Bob could name Alice's response id and continue her conversation at the
provider. The id a provider gives an answer is kept on its trace
(Trace.response_id, from the span's detail, passthru/doors/responses.py); a
request naming an id another key made is refused 404, as an unknown one, in
OpenAI's envelope. An operator key's callers (`ops/…`) are one tenant. An id
Marina never recorded (made elsewhere, or before this was kept, or still in a
spool while the database was down) is passed on: Marina cannot say whose it is."""
from __future__ import annotations

import asyncio
from typing import Any

from django.db import DatabaseError

from kernel import dbwriter
from ledger.spend import services
from passthru.auth import AGENT_SEPARATOR
from passthru.context import RequestContext
from passthru.errors import ApiError


async def check_previous(ctx: RequestContext, body: dict[str, Any]) -> None:
    previous = body.get("previous_response_id")
    if not isinstance(previous, str) or not previous:
        return
    try:
        # On the ledger writer's thread and connection, as the stored keys are read.
        recorded = await asyncio.wrap_future(dbwriter.submit(services.response_key, previous))
    except DatabaseError:
        raise ApiError(
            503, "previous_response_id cannot be checked: the database does not answer. Retry in 2 s.",
            code="service_unavailable", error_type="server_error", headers={"Retry-After": "2"},
        ) from None
    tenant = ctx.key_name.split(AGENT_SEPARATOR, 1)[0]  # an operator key's callers share its responses
    if recorded is not None and not services.owns(tenant, recorded):
        raise ApiError(
            404, f"No response with id {previous!r}.", code="response_not_found", param="previous_response_id"
        )
