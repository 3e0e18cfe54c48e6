"""POST /v1/benchmarks/runs: a harness on another machine files a run into the
benchmark ledger with a Marina key (reference §1.1).

Body: `{result, targetKind, target, label?, judge?, costUsd?, replicateGroup?}`
where `result` is a ledger file (Marina's or the original's) or a τ² results
file, as JSON. The import is the command line's (ledger.benchmarks.importers):
the same checks, all or nothing, idempotent. 201 with the run when recorded,
200 when the content was recorded before; 400 with the reason, 413 past
MARINA_MAX_UPLOAD_BYTES; under MARINA_OPEN_API (no keys) 403
`open_api_read_only` unless MARINA_OPEN_API_UPLOADS=true.

Lives in marina/ because it needs both rooms: passthru's key check and the
ledger's importer (ledger never imports passthru)."""
from __future__ import annotations

import json
import os
import tempfile
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Router
from pydantic import BaseModel, Field

from ledger.benchmarks.errors import UncleanRunError
from ledger.benchmarks.importers import ImportResult, import_ledger, import_tau2
from ledger.benchmarks.options import ImportOptions, max_length
from passthru import auth
from passthru.errors import UPLOAD_LIMIT, ApiError, check_request_size, declared_size
from passthru.intake import admitted
from passthru.schemas import ErrorEnvelope, inline_schema

router = Router(tags=["benchmarks"])


class UploadRequest(BaseModel):
    """What a harness sends (documented in the OpenAPI schema; parsed by hand
    below so the size limit applies before anything is read)."""

    result: dict[str, Any] = Field(description="a ledger file (Marina's or the original's) or a τ² results.json")
    targetKind: Literal["model", "crew"]  # camelCase: the reference's field names
    target: str = Field(min_length=1, max_length=max_length("target"))
    label: str | None = None
    judge: str | None = None
    costUsd: float | None = Field(default=None, ge=0)
    replicateGroup: str | None = None


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code="invalid_request_error", param=param)


def _read_body(request: HttpRequest) -> bytes:
    # passthru/intake.py has refused an over-limit body before Django read it
    # all; this is the check for a server without it (WSGI).
    check_request_size(declared_size({k.lower(): v for k, v in request.headers.items()}), UPLOAD_LIMIT)
    # request.read, not request.body: the body cap for chat requests is smaller than an upload's.
    body = request.read(settings.MARINA_MAX_UPLOAD_BYTES + 1)
    check_request_size(len(body), UPLOAD_LIMIT)
    return body


def _parse(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _bad("The body is not JSON.") from None
    if not isinstance(data, dict):
        raise _bad("The body must be a JSON object.")
    result = data.get("result")
    if not isinstance(result, dict):
        raise _bad("`result` must be a ledger file or τ² results file, as a JSON object.", "result")
    for name in ("target", "targetKind"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise _bad(f"`{name}` is required.", name)
    for name in ("label", "judge", "replicateGroup"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise _bad(f"`{name}` must be a string.", name)
    cost = data.get("costUsd")
    if cost is not None:
        if isinstance(cost, bool) or not isinstance(cost, (int, float, str)):
            raise _bad("`costUsd` must be a number of dollars.", "costUsd")
        try:
            data["costUsd"] = Decimal(str(cost))
        except InvalidOperation:
            raise _bad("`costUsd` must be a number of dollars.", "costUsd") from None
    return data


def _import(data: dict[str, Any], keys: tuple[str, ...] | None) -> ImportResult:
    options = ImportOptions(
        target_kind=data["targetKind"], target=data["target"], group=data.get("replicateGroup"),
        label=data.get("label"), judge=data.get("judge"), cost_usd=data.get("costUsd"),
        keys=keys,  # the uploader's key: its items link to that key's traces only (docs/security.md)
    )  # fmt: skip
    result = data["result"]
    if "simulations" in result and "info" in result:
        # τ²'s reader streams from a file: the upload is written to one, read, and removed.
        fd, path = tempfile.mkstemp(prefix="marina-upload-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(result, out, ensure_ascii=False)
            try:
                return import_tau2(path, options, progress=False)
            except ValueError as exc:
                raise ValueError(str(exc).replace(path, "result")) from None
        finally:
            os.unlink(path)
    return import_ledger(result, options)


@router.post(
    "/runs",
    response={200: dict, 201: dict, 400: ErrorEnvelope, 401: ErrorEnvelope, 403: ErrorEnvelope, 413: ErrorEnvelope},
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": inline_schema(UploadRequest)}}}
    },
    summary="File a benchmark run (a ledger file or τ² results) into the ledger",
)
async def upload_run(request: HttpRequest) -> HttpResponse:
    headers = {k.lower(): v for k, v in request.headers.items()}
    # The key (and the size) were checked before the body was read (passthru/intake.py).
    caller = admitted(request) or await auth.authenticate(headers.get("authorization"), headers.get("x-marina-agent"))
    if not caller.keyed and not settings.MARINA_OPEN_API_UPLOADS:
        raise ApiError(
            403,
            "The API is open (MARINA_OPEN_API) without keys: it files no runs unless MARINA_OPEN_API_UPLOADS=true.",
            code="open_api_read_only",
        )
    data = _parse(_read_body(request))
    try:
        keys = (caller.owner,) if caller.keyed else None
        result = await sync_to_async(_import, thread_sensitive=True)(data, keys)
    except UncleanRunError as exc:
        raise _bad(str(exc).split(": ", 1)[-1], "result") from None
    except ValueError as exc:  # LedgerInputError names the problem; option errors name the flag
        text = str(exc).replace("<ledger data>: ", "result: ").replace("--cost-usd", "costUsd")
        text = text.replace("--group", "replicateGroup").replace("--target", "target").replace("--label", "label")
        raise _bad(text.replace("--judge", "judge")) from None
    body = {**result.as_dict(), "source": "upload"}
    return HttpResponse(
        json.dumps(body, default=str), status=201 if result.created else 200, content_type="application/json"
    )
