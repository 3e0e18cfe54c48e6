"""Every /api answer is the documented JSON envelope: unknown paths (Django's
HTML 404 before) and wrong methods on known paths (Ninja's text 405 before)
included, keyed or not."""
from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import MARINA_KEY

KEY = {"HTTP_AUTHORIZATION": f"Bearer {MARINA_KEY}"}


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("get", "/api/traces", 404, "not_found"),
        ("get", "/api/nowhere/at/all", 404, "not_found"),
        ("get", "/api", 404, "not_found"),
        ("get", "/api/", 404, "not_found"),
        ("post", "/api/runs", 405, "method_not_allowed"),
        ("delete", "/api/runs/1", 405, "method_not_allowed"),
        ("put", "/api/spend", 405, "method_not_allowed"),
    ],
)
@pytest.mark.parametrize("keyed", [True, False])
def test_unknown_paths_and_wrong_methods_answer_in_the_envelope(settings, db, method, path, status, code, keyed):
    settings.MODEL_API_KEYS = f"{MARINA_KEY}:tester"
    response = getattr(Client(HTTP_HOST="127.0.0.1"), method)(path, **(KEY if keyed else {}))
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert path in error["message"]
    if status == 405:
        assert response["Allow"] == "GET" and "use GET" in error["message"]
