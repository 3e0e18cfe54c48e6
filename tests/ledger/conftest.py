from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ledger.models import BenchmarkRun
from tests.ledger.report_builders import build_run


@pytest.fixture
def runs(db) -> dict[str, BenchmarkRun]:  # type: ignore[no-untyped-def]
    """Two imported airline runs (the second with two infrastructure errors) and a retail run."""
    return {
        "oracle": build_run(
            "airline-oracle", group="arm-a", cost_nanousd=800_000_000, cost_source="cli"
        ),
        "infra": build_run(
            "airline-infra-errors", target="marina/verify:openrouter/oracle-agent", group="arm-b",
            cost_nanousd=1_140_000_000, cost_source="spend",
        ),
        "retail": build_run("retail-oracle", group="retail"),
    }  # fmt: skip


@pytest.fixture
def user_client(db) -> Client:  # type: ignore[no-untyped-def]
    """A logged-in user who is not staff: the reports need a login, not admin rights."""
    user = User.objects.create_user("reader", password="not-a-real-password-1")
    client = Client()
    client.force_login(user)
    return client
