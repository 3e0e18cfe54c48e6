"""Fixtures for tests/marina: a second live server, Django's route alone."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from marina.asgi import django_application
from tests.conftest import serve_in_thread


@pytest.fixture(scope="session")
def _django_only_server(django_db_setup: None, django_db_blocker: object) -> Iterator[str]:
    with serve_in_thread(django_application) as url:
        yield url


@pytest.fixture
def urls(marina_url: str, _django_only_server: str) -> dict[str, str]:
    return {"fast": marina_url, "django": _django_only_server}
