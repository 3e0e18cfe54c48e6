from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too so the e2e tests run under --strict-markers whatever the root config says.
    config.addinivalue_line("markers", "tau2: runs the real τ²-bench CLI (needs .ci/install-tau2 first)")
