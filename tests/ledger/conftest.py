from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ledger.benchmarks.importers import import_tau2
from ledger.models import BenchmarkRun
from tests.ledger.tau2files import results


def import_fixture(name: str, **options: object) -> BenchmarkRun:
    """Import tests/fixtures/tau2/<name>.results.json with the real importer."""
    return import_tau2(results(name), **options).run  # type: ignore[arg-type]


@pytest.fixture
def runs(db) -> dict[str, BenchmarkRun]:  # type: ignore[no-untyped-def]
    """Two imported airline runs (the second with two infrastructure errors) and a retail run."""
    return {
        "oracle": import_fixture("airline-oracle", target="openrouter/oracle-agent", group="arm-a", cost_usd=0.8),
        "infra": import_fixture(
            "airline-infra-errors", target="marina/verify:openrouter/oracle-agent", group="arm-b", cost_usd=1.14
        ),
        "retail": import_fixture("retail-oracle", target="openrouter/oracle-agent", group="retail"),
    }


@pytest.fixture
def user_client(db) -> Client:  # type: ignore[no-untyped-def]
    """A logged-in user who is not staff: the reports need a login, not admin rights."""
    user = User.objects.create_user("reader", password="not-a-real-password-1")
    client = Client()
    client.force_login(user)
    return client
