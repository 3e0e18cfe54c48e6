"""Fixtures for tests/marina: a second live server, the whole site's Django handler alone."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from marina.asgi import site_application
from tests.conftest import serve_in_thread


@pytest.fixture(scope="session")
def _site_server(django_db_setup: None, django_db_blocker: object) -> Iterator[str]:
    with serve_in_thread(site_application) as url:
        yield url


@pytest.fixture
def urls(marina_url: str, _site_server: str) -> dict[str, str]:
    return {"door": marina_url, "site": _site_server}
