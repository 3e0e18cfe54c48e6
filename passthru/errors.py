"""Errors the /v1 surface answers with, all in OpenAI's error envelope.

Operations never catch these: marina/api.py maps each class to its status and
envelope once (STYLE practice 3)."""
from __future__ import annotations

from typing import Any

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


class ApiError(Exception):
    """An error Marina itself decides, with the OpenAI fields to report."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or _default_code(status)
        self.param = param
        self.error_type = error_type or _TYPE_BY_STATUS.get(status, "server_error")

    def envelope(self) -> dict[str, Any]:
        return error_envelope(self.message, self.error_type, self.code, self.param)


class UpstreamError(ApiError):
    """The provider could not be reached or answered with something unusable.

    `kind` is the short error kind that traces record: connect, reset, timeout,
    bad_json, cancelled."""

    def __init__(self, provider: str, kind: str, message: str, *, status: int = 502) -> None:
        super().__init__(status, message, code="upstream_error")
        self.provider = provider
        self.kind = kind


def error_envelope(message: str, error_type: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _default_code(status: int) -> str:
    if status in (401, 403):
        return "invalid_api_key"
    if status == 404:
        return "not_found"
    if status == 429:
        return "rate_limit_exceeded"
    if status in (502, 503, 504):
        return "upstream_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"
