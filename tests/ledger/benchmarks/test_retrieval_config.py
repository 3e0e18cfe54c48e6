"""banking_knowledge's retrieval config (τ²'s --retrieval-config, in results.json `info`) is a run
setting: read on import, kept on the run and in both ledger file formats, in the upload answer and
/api/runs, shown on the run page and in the admin, and part of comparability."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from ledger.benchmarks.importers import convert_tau2, import_ledger, import_tau2
from ledger.benchmarks.options import ImportOptions
from ledger.models import BenchmarkRun
from tests.ledger.conftest import readers_account
from tests.ledger.tau2files import FAKE_KEY, banking_copy, results

pytestmark = pytest.mark.django_db
KWARGS = {"top_k": 8, "api_key": FAKE_KEY}


def _import(path, **options) -> BenchmarkRun:
    return import_tau2(path, ImportOptions(target="openrouter/oracle-agent", **options)).run


def test_a_banking_run_keeps_its_retrieval_config_and_kwargs_without_credentials(tmp_path):
    run = _import(banking_copy(tmp_path / "bm25.json", "bm25", KWARGS))
    run.refresh_from_db()
    assert (run.benchmark, run.retrieval_config, run.retrieval_config_kwargs) == ("tau2-banking_knowledge", "bm25", {"top_k": 8})
    assert FAKE_KEY not in json.dumps(run.retrieval_config_kwargs)


def test_other_domains_have_none_and_a_banking_file_without_one_is_not_board_comparable(tmp_path):
    airline = _import(results("airline-oracle"))
    assert (airline.retrieval_config, airline.retrieval_config_kwargs) == ("", {})
    assert not any("retrieval" in r for r in airline.comparability_reasons)
    bare = _import(banking_copy(tmp_path / "none.json", None))
    assert bare.retrieval_config == ""
    assert any(
        "does not record its retrieval config; the board's banking_knowledge results must carry one" in r
        for r in bare.comparability_reasons
    ), bare.comparability_reasons
    kept = _import(banking_copy(tmp_path / "kept.json", "openai_embeddings"))
    assert not any("retrieval" in r for r in kept.comparability_reasons)


@pytest.mark.parametrize("fmt", ["marina", "original"])
def test_both_ledger_file_formats_carry_it_and_import_it_back(tmp_path, fmt):
    ledger, path = convert_tau2(banking_copy(tmp_path / "r.json", "openai_embeddings_grep", KWARGS), tmp_path / "l.json", fmt=fmt)
    assert ledger.run.retrieval_config == "openai_embeddings_grep"
    text = path.read_text()
    assert FAKE_KEY not in text
    assert "openai_embeddings_grep" in text
    run = import_ledger(path, ImportOptions(target="crew-a", target_kind="crew")).run
    assert (run.retrieval_config, run.retrieval_config_kwargs) == ("openai_embeddings_grep", {"top_k": 8})


def test_compare_of_two_banking_runs_with_different_configs_says_not_comparable_and_names_them(tmp_path):
    bm25 = _import(banking_copy(tmp_path / "a.json", "bm25"))
    emb = _import(banking_copy(tmp_path / "b.json", "openai_embeddings"), label="emb")
    out = StringIO()
    call_command("compare", str(bm25.pk), str(emb.pk), "--resamples", "50", stdout=out)
    assert (
        "warning: not comparable: runs differ in retrieval config (how banking_knowledge's agent searches its "
        f"knowledge base): A bm25 (#{bm25.pk}); B openai_embeddings (#{emb.pk})"
    ) in out.getvalue()
    out = StringIO()
    same = _import(banking_copy(tmp_path / "c.json", "bm25", {"top_k": 3}))
    call_command("compare", str(bm25.pk), str(same.pk), "--resamples", "50", stdout=out)
    assert "not comparable" not in out.getvalue()


def test_run_page_api_and_admin_show_it(tmp_path, client):
    run = _import(banking_copy(tmp_path / "a.json", "bm25", KWARGS))
    client.force_login(readers_account("reader"))
    page = client.get(f"/reports/runs/{run.pk}/").content.decode()
    assert '<dt>Retrieval config</dt><dd class="retrieval-config">bm25 <span class="muted">top_k=8</span></dd>' in page
    listed = json.loads(client.get("/api/runs").content)["runs"]
    assert [(r["id"], r["retrieval_config"], r["retrieval_config_kwargs"]) for r in listed] == [(run.pk, "bm25", {"top_k": 8})]
    one = json.loads(client.get(f"/api/runs/{run.pk}").content)
    assert (one["retrieval_config"], one["retrieval_config_kwargs"]) == ("bm25", {"top_k": 8})
    airline = _import(results("airline-oracle"))
    assert "Retrieval config" not in client.get(f"/reports/runs/{airline.pk}/").content.decode()

    admin = readers_account("admin2")
    admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    change = client.get(f"/admin/ledger/benchmarkrun/{run.pk}/change/").content.decode()
    assert "Retrieval config" in change and "bm25" in change
    assert FAKE_KEY not in change


def test_the_summary_and_the_import_say_it(tmp_path):
    path = banking_copy(tmp_path / "a.json", "grep_only")
    out = StringIO()
    call_command("tau2_summary", str(path), stdout=out)
    assert "banking_knowledge · agent openrouter/oracle-agent · user openrouter/oracle-user · 40 simulations · retrieval config grep_only" in out.getvalue()
    out = StringIO()
    call_command("tau2_summary", str(path), "--json", stdout=out)
    assert json.loads(out.getvalue())["retrieval_config"] == "grep_only"
    out = StringIO()
    call_command("import_tau2", str(path), "--target", "openrouter/oracle-agent", stdout=out)
    assert "  retrieval config grep_only" in out.getvalue()
