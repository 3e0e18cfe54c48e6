"""POST /v1/benchmarks/runs: a harness on another machine files a run into the
benchmark ledger with a Marina key (reference §1.1).

Body: `{result, targetKind, target, label?, judge?, costUsd?, replicateGroup?}`
where `result` is a ledger file (Marina's or the original's) or a τ² results
file, as JSON. The import is the command line's (ledger.benchmarks.importers):
the same checks, all or nothing, idempotent. 201 with the run when recorded,
200 when the content was recorded before (by this key; another key's: 409);
403 for a replicate group holding another key's runs (ledger/benchmarks/owners.py); 400 with the reason, 413 past
MARINA_MAX_UPLOAD_BYTES; under MARINA_OPEN_API (no keys) 403
`open_api_read_only` unless MARINA_OPEN_API_UPLOADS=true.

Lives in marina/ because it needs both rooms: passthru's key check and the
ledger's importer (ledger never imports passthru)."""
from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import IO, Any, Literal

import ijson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Router
from pydantic import BaseModel, Field

from ledger.benchmarks import owners as run_owners
from ledger.benchmarks.errors import GroupTakenError, UncleanRunError
from ledger.benchmarks.importers import ImportResult, import_ledger, import_tau2
from ledger.benchmarks.options import ImportOptions, max_length
from marina.read_schemas import ImportedRun
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


READ_CHUNK = 1 << 20


def _read_body(request: HttpRequest) -> IO[bytes]:
    """The body, copied to a temporary file as it is read (a 40 MB upload took
    a worker from ~98 MB to 1.16 GB when read whole and parsed at once)."""
    # passthru/intake.py has refused an over-limit body before Django read it
    # all; this is the check for a server without it (WSGI).
    check_request_size(declared_size({k.lower(): v for k, v in request.headers.items()}), UPLOAD_LIMIT)
    body = tempfile.TemporaryFile(prefix="marina-upload-")
    size = 0
    # request.read, not request.body: the body cap for chat requests is smaller than an upload's.
    while chunk := request.read(READ_CHUNK):
        size += len(chunk)
        check_request_size(size, UPLOAD_LIMIT)
        body.write(chunk)
    body.seek(0)
    return body


class _JsonWriter:
    """ijson's events written back out as JSON text (the `result` value, to a file)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.counts: list[int] = []  # per open container: values (arrays) or keys (objects) so far
        self.in_map: list[bool] = []

    def _value(self, text: str) -> None:
        if self.counts and not self.in_map[-1]:
            if self.counts[-1]:
                self.out.write(",")
            self.counts[-1] += 1
        self.out.write(text)

    def event(self, kind: str, value: Any) -> None:
        if kind == "map_key":
            if self.counts[-1]:
                self.out.write(",")
            self.counts[-1] += 1
            self.out.write(json.dumps(value, ensure_ascii=False) + ":")
        elif kind in ("start_map", "start_array"):
            self._value("{" if kind == "start_map" else "[")
            self.counts.append(0)
            self.in_map.append(kind == "start_map")
        elif kind in ("end_map", "end_array"):
            self.counts.pop()
            self.in_map.pop()
            self.out.write("}" if kind == "end_map" else "]")
        elif kind == "string":
            self._value(json.dumps(value, ensure_ascii=False))
        elif kind == "number":
            self._value(str(value))
        elif kind == "boolean":
            self._value("true" if value else "false")
        else:  # null
            self._value("null")


def _parse(body: IO[bytes], result_file: IO[str]) -> tuple[dict[str, Any], set[str]]:
    """The upload's fields, its `result` written to `result_file` as it is
    parsed (never held whole), and the keys of `result`."""
    data: dict[str, Any] = {}
    keys: set[str] = set()
    try:
        events = ijson.parse(body)
        first = next(events, None)
        if first is None or first[1] != "start_map":
            raise _bad("The body must be a JSON object." if first is not None else "The body is not JSON.")
        for prefix, kind, value in events:
            if prefix != "" or kind != "map_key":
                continue  # the end of the object
            if value == "result":
                _copy_value(events, result_file, keys, data)
            else:
                data[value] = _built_value(events)
    except (ijson.JSONError, UnicodeDecodeError):
        raise _bad("The body is not JSON.") from None
    if "result" not in data:
        raise _bad("`result` must be a ledger file or τ² results file, as a JSON object.", "result")
    for name in ("target", "targetKind"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise _bad(f"`{name}` is required.", name)
    for name in ("label", "judge", "replicateGroup"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise _bad(f"`{name}` must be a string.", name)
    data["costUsd"] = _dollars(data.get("costUsd"))
    return data, keys


def _built_value(events: Iterator[tuple[str, str, Any]]) -> Any:
    """The next value of `events` (a field beside `result`: small), built whole."""
    builder = ijson.ObjectBuilder()
    depth = 0
    for _, kind, value in events:
        builder.event(kind, value)
        depth += kind in ("start_map", "start_array")
        depth -= kind in ("end_map", "end_array")
        if depth == 0:
            break
    return builder.value


def _dollars(cost: Any) -> Decimal | None:
    """`costUsd` as dollars, or a 400 naming it."""
    if cost is None:
        return None
    if isinstance(cost, bool) or not isinstance(cost, (int, float, str, Decimal)):
        raise _bad("`costUsd` must be a number of dollars.", "costUsd")
    try:
        return Decimal(str(cost))
    except InvalidOperation:
        raise _bad("`costUsd` must be a number of dollars.", "costUsd") from None


def _copy_value(events: Iterator[tuple[str, str, Any]], out: IO[str], keys: set[str], data: dict[str, Any]) -> None:
    writer = _JsonWriter(out)
    depth = 0
    for _, kind, value in events:
        if depth == 0 and kind != "start_map":
            raise _bad("`result` must be a ledger file or τ² results file, as a JSON object.", "result")
        if depth == 1 and kind == "map_key":
            keys.add(value)
        writer.event(kind, value)
        depth += kind in ("start_map", "start_array")
        depth -= kind in ("end_map", "end_array")
        if depth == 0:
            break
    out.flush()
    data["result"] = True


def _import(data: dict[str, Any], result_path: str, top_keys: set[str], owners: tuple[str, ...] | None) -> ImportResult:
    options = ImportOptions(
        target_kind=data["targetKind"], target=data["target"], group=data.get("replicateGroup"),
        label=data.get("label"), judge=data.get("judge"), cost_usd=data.get("costUsd"),
        keys=owners,  # the uploader's key: its items link to that key's traces only (docs/security.md)
        owner=owners[0] if owners else "",  # the run is the uploader's (ledger/benchmarks/owners.py)
    )  # fmt: skip
    if "simulations" in top_keys and "info" in top_keys:
        # τ²'s reader streams from the file the upload's `result` was written to.
        try:
            return import_tau2(result_path, options, progress=False)
        except GroupTakenError:
            raise  # names the group only
        except ValueError as exc:
            raise ValueError(str(exc).replace(result_path, "result")) from None
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    return import_ledger(result, options)


@router.post(
    "/runs",
    response={
        200: ImportedRun, 201: ImportedRun, 400: ErrorEnvelope, 401: ErrorEnvelope, 403: ErrorEnvelope,
        409: ErrorEnvelope, 413: ErrorEnvelope,
    },
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
    with _read_body(request) as body, tempfile.NamedTemporaryFile(
        "w+", encoding="utf-8", prefix="marina-upload-", suffix=".json"
    ) as result_file:
        data, keys = await sync_to_async(_parse, thread_sensitive=False)(body, result_file)
        try:
            owners = (caller.owner,) if caller.keyed else None  # its items link to the uploader's traces only
            result = await sync_to_async(_import, thread_sensitive=True)(data, result_file.name, keys, owners)
        except GroupTakenError as exc:  # a run of its own would go into another key's group: nothing written
            raise ApiError(403, str(exc), code="permission_denied", param="replicateGroup") from None
        except UncleanRunError as exc:
            raise _bad(str(exc).split(": ", 1)[-1], "result") from None
        except ValueError as exc:  # LedgerInputError names the problem; option errors name the flag
            text = str(exc).replace("<ledger data>: ", "result: ").replace("--cost-usd", "costUsd")
            text = text.replace("--group", "replicateGroup").replace("--target", "target").replace("--label", "label")
            raise _bad(text.replace("--judge", "judge")) from None
    if caller.keyed and not result.created and not run_owners.may_read(caller.owner, result.run.key_name):
        # The same content filed before by another key: its run is not this key's to see.
        raise ApiError(409, "This result was filed before by another key; nothing was written.", code="already_filed")
    body_out = {**result.as_dict(), "source": "upload"}
    return HttpResponse(
        json.dumps(body_out, default=str), status=201 if result.created else 200, content_type="application/json"
    )
