from __future__ import annotations

import functools
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ledger.benchmarks.importers import import_loaded, load_tau2
from ledger.benchmarks.ledgerfile import Ledger
from ledger.benchmarks.options import ImportOptions
from ledger.models import BenchmarkRun
from tests.ledger.tau2files import results


@functools.cache
def _read(name: str) -> Ledger:
    """Each fixture file read once a session: reading (parsing and hashing
    the JSON) was most of an import's time, 1.4-2.8 s of setup for a test
    that imports three; the reader has tests of its own (test_importers,
    test_tau2_adapter, test_bad_files)."""
    return load_tau2(results(name))


def import_fixture(name: str, **options: Any) -> BenchmarkRun:
    """Import tests/fixtures/tau2/<name>.results.json with the real importer
    (`import_tau2` is `load_tau2` then `import_loaded`)."""
    return import_loaded(_read(name), results(name), ImportOptions(**options)).run


@pytest.fixture
def runs(db) -> dict[str, BenchmarkRun]:
    """Two imported airline runs (the second with two infrastructure errors) and a retail run."""
    return {
        "oracle": import_fixture("airline-oracle", target="openrouter/oracle-agent", group="arm-a", cost_usd=0.8),
        "infra": import_fixture(
            "airline-infra-errors", target="marina/verify:openrouter/oracle-agent", group="arm-b", cost_usd=1.14
        ),
        "retail": import_fixture("retail-oracle", target="openrouter/oracle-agent", group="retail"),
    }


READ_PERMISSIONS = ("view_benchmarkrun", "view_spenddaily", "view_trace", "view_experiment")


def readers_account(name: str, permissions: tuple[str, ...] = READ_PERMISSIONS) -> User:
    """A staff account (not a superuser) holding the given ledger view permissions."""
    from django.contrib.auth.models import Permission

    user = User.objects.create_user(name, password="not-a-real-password-1", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="ledger", codename__in=permissions))
    return user


@pytest.fixture
def user_client(db) -> Client:
    """A logged-in staff user with the admin's view permissions on the ledger:
    what the report pages ask (ledger/reports/views.py `needs`), and no more."""
    user = readers_account("reader")
    client = Client()
    client.force_login(user)
    return client
