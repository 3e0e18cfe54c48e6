"""The τ² fixture files (tests/fixtures/tau2, in the repository: see its README
for where each came from) and small helpers that derive broken or key-holding
copies of them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# In the repository, so a clone anywhere runs the tests with nothing beside it.
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tau2"
NAMES = ["airline-oracle", "retail-oracle", "airline-skipped-samples", "airline-infra-errors"]
FAKE_KEY = "sk-test-not-a-real-key"  # what every fixture stores as llm_args.api_key
REAL_LOOKING_KEY = "sk-or-v1-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def results(name: str) -> Path:
    return FIXTURES / f"{name}.results.json"


def expected(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.expected.json").read_text())


def intended_pass_hat_k(name: str) -> list[float]:
    """The figures Marina reports: τ²'s, infrastructure errors excluded and k
    capped (for the infra fixture, the README's pandas 2.3.3 row)."""
    if name == "airline-infra-errors":
        return [0.725, 0.533333, 0.4]
    data = expected(name)
    return [data[f"pass^{k}"] for k in range(1, data["num_trials"] + 1)]


def copy_with(name: str, dst: Path, old: str = FAKE_KEY, new: str = FAKE_KEY) -> Path:
    """The fixture copied to dst, with one text replaced (e.g. a real-looking key)."""
    dst.write_text(results(name).read_text().replace(old, new))
    return dst


def truncated(name: str, dst: Path, fraction: float = 0.6) -> Path:
    """The fixture cut off part-way (inside its simulations for fraction >= 0.5)."""
    data = results(name).read_bytes()
    dst.write_bytes(data[: int(len(data) * fraction)])
    return dst


def banking_copy(dst: Path, retrieval_config: str | None, kwargs: dict[str, Any] | None = None) -> Path:
    """The sierra fixture (airline-infra-errors, written by sierra's τ² a2c0247) as a banking_knowledge
    run: its domain and, where sierra's τ² writes them, `info.retrieval_config` and its kwargs. Only
    `info` changes (the reader takes nothing else from a domain), so the figures stay the fixture's."""
    data = json.loads(results("airline-infra-errors").read_text())
    data["info"]["environment_info"]["domain_name"] = "banking_knowledge"
    data["info"]["retrieval_config"] = retrieval_config
    data["info"]["retrieval_config_kwargs"] = kwargs
    dst.write_text(json.dumps(data))
    return dst
