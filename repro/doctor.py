"""`repro_tau2 doctor`: are the prerequisites there? Names and versions only;
no value of any key is ever shown."""
from __future__ import annotations

import platform
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass

from django.conf import settings

from ledger.models import Experiment
from repro import retrieval, tau2cli

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    status: str  # ok | warn | FAIL
    name: str
    detail: str


def checks(server_url: str, retrieval_config: str = retrieval.DEFAULT) -> list[Check]:
    out: list[Check] = []
    try:
        install = tau2cli.detect()
    except tau2cli.Tau2NotFound as exc:
        out.append(Check(FAIL, "τ²", str(exc)))
        install = None
    if install is not None:
        out.append(Check(OK, "τ²", f"{install.distribution} {install.version} at {install.path}"))
        version = install.python_version
        if not version:
            out.append(Check(WARN, "τ²'s Python", "unknown (its script names no Python interpreter)"))
        else:
            # sierra's τ² imports audioop, which Python 3.13 removed.
            bad = install.distribution == tau2cli.SIERRA and tuple(int(p) for p in version.split(".")[:2]) >= (3, 13)
            out.append(Check(FAIL if bad else OK, "τ²'s Python", version + (" (τ² needs 3.12: 3.13 has no audioop)" if bad else "")))
    out.append(Check(OK, "Marina's Python", platform.python_version()))
    configured = [p for p, conf in settings.MARINA_PROVIDERS.items() if conf.get("api_key")]
    keys = ", ".join(sorted(settings.MARINA_PROVIDERS[p]["key_env"] for p in configured))
    out.append(Check(
        OK if configured else WARN, "provider keys",
        f"set here: {keys}" if configured else "none set in this environment (the server's own may differ)",
    ))  # fmt: skip
    out.append(Check(
        OK, "τ²'s own model calls",
        "the kit sets OPENAI_BASE_URL to Marina's /v1 and OPENAI_API_KEY to the experiment's key in τ²'s "
        "environment: sierra τ²'s NL-assertion judge (retail, gpt-4.1-2025-04-14), banking's embeddings and "
        "reranker are metered and budgeted with the arm (Marina must serve those model ids)",
    ))  # fmt: skip
    out += _retrieval(install, retrieval_config)
    out.append(_server(server_url))
    try:
        out.append(Check(OK, "ledger", f"database reachable, {Experiment.objects.count()} experiment(s)"))
    except Exception as exc:  # the database is the one thing every later step needs
        out.append(Check(FAIL, "ledger", f"database not usable: {type(exc).__name__} (run manage.py migrate)"))
    return out


def _retrieval(install: tau2cli.Tau2Install | None, config: str) -> list[Check]:
    """banking_knowledge: whether this τ² has it, and what `--retrieval-config` needs beyond τ²."""
    out = []
    if install is not None and install.distribution == tau2cli.NVIDIA:
        out.append(Check(WARN, "banking_knowledge",
                         f"{install.distribution} has no banking_knowledge: install sierra's τ² (.ci/install-tau2-sierra) "
                         "and set TAU2_BIN to run it"))  # fmt: skip
    needs = retrieval.needs(config)
    missing_sandbox = needs.sandbox and shutil.which("srt") is None
    out.append(Check(WARN if missing_sandbox or needs.unmetered else OK, "retrieval config",
                     needs.sentence() + ("; `srt` is not on PATH here" if missing_sandbox else "")))  # fmt: skip
    out.append(Check(OK, "retrieval configs with nothing more",
                     f"{', '.join(retrieval.NOTHING_MORE)} (searched in process); qwen_embeddings* call OpenRouter "
                     "directly and cannot be metered"))  # fmt: skip
    return out


def _server(server_url: str) -> Check:
    url = server_url.rstrip("/") + "/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=5):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            return Check(FAIL, "Marina", f"{url} answered {exc.code}")
    except (urllib.error.URLError, OSError) as exc:
        return Check(FAIL, "Marina", f"no server at {server_url} ({getattr(exc, 'reason', exc)})")
    return Check(OK, "Marina", f"answering at {server_url}")
