"""The import key (ledger/benchmarks/contentkey.py): the JSON content's, so a
file imported from disk and the same file re-serialised (an upload's body)
are one run; runs keyed by the file's bytes before are still recognised."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ledger.benchmarks import contentkey
from ledger.benchmarks.importers import convert_tau2, import_ledger, import_tau2
from ledger.benchmarks.tau2.results import read_results
from ledger.models import BenchmarkRun
from tests.ledger.tau2files import NAMES
from tests.ledger.tau2files import results as fixture


def _respelled(name: str, dst: Path) -> Path:
    """The fixture as a harness would re-send it: compact, ASCII escapes, numbers spelled anew."""
    text = json.dumps(json.loads(fixture(name).read_text()), ensure_ascii=True, separators=(",", ":"))
    dst.write_text(text.replace('"reward":1.0', '"reward":1.0e0').replace('"role":"user"', '"role":"\\u0075ser"'))
    return dst


@pytest.mark.parametrize("name", NAMES)
def test_the_streamed_key_is_the_parsed_documents(name):
    streamed = read_results(fixture(name), progress=False)
    assert streamed.content_sha256 == contentkey.of_value(json.loads(fixture(name).read_text()))
    assert streamed.sha256 == hashlib.sha256(fixture(name).read_bytes()).hexdigest() != streamed.content_sha256


def test_spelling_does_not_change_the_key_and_content_does(tmp_path):
    original = read_results(fixture("airline-oracle"), progress=False)
    respelled_path = _respelled("airline-oracle", tmp_path / "respelled.json")
    assert "1.0e0" in respelled_path.read_text() and "\\u" in respelled_path.read_text()
    respelled = read_results(respelled_path, progress=False)
    assert respelled.sha256 != original.sha256 and respelled.content_sha256 == original.content_sha256
    changed = json.loads(fixture("airline-oracle").read_text())
    changed["simulations"][0]["reward_info"]["reward"] = 0.5
    assert contentkey.of_value(changed) != original.content_sha256
    # numbers keep their type: 1 and 1.0 are different documents, as true and 1 are
    assert len({contentkey.of_value(v) for v in ([1], [1.0], [True], ["1"], [None], [[]], [{}])}) == 7


@pytest.mark.django_db
def test_a_respelled_file_and_its_ledger_import_as_the_first_run(tmp_path):
    first = import_tau2(fixture("retail-oracle"), target="a")
    again = import_tau2(_respelled("retail-oracle", tmp_path / "r.json"), target="b")
    assert (again.created, again.run.pk) == (False, first.run.pk)
    for fmt in ("marina", "original"):
        _, path = convert_tau2(_respelled("retail-oracle", tmp_path / f"{fmt}-src.json"), tmp_path / f"{fmt}.json", fmt=fmt)
        assert import_ledger(path, target_kind="model", target="c").run.pk == first.run.pk
    assert BenchmarkRun.objects.count() == 1


@pytest.mark.django_db
def test_a_ledger_without_a_source_is_one_run_as_a_file_or_as_data(tmp_path):
    _, path = convert_tau2(fixture("airline-oracle"), tmp_path / "o.json", fmt="original")
    data = json.loads(path.read_text())
    del data["source"]  # as the original Marina wrote its files
    path.write_text(json.dumps(data, indent=4))
    from_file = import_ledger(path, target_kind="model", target="m")
    from_data = import_ledger(json.loads(path.read_text()), target_kind="model", target="m")
    assert from_file.created and (from_data.created, from_data.run.pk) == (False, from_file.run.pk)
    assert from_file.run.source_sha256 == contentkey.of_value(data)


@pytest.mark.django_db
def test_runs_keyed_by_the_files_bytes_are_still_recognised(tmp_path):
    # Imported before the key was the content's: source_sha256 holds the file's SHA-256.
    old = import_tau2(fixture("airline-oracle"), target="a").run
    file_sha = hashlib.sha256(fixture("airline-oracle").read_bytes()).hexdigest()
    BenchmarkRun.objects.filter(pk=old.pk).update(source_sha256=file_sha)
    assert import_tau2(fixture("airline-oracle"), target="b").run.pk == old.pk
    _, path = convert_tau2(fixture("airline-oracle"), tmp_path / "l.json")
    assert import_ledger(path, target_kind="model", target="c").run.pk == old.pk
    # and a ledger file written then (its source.sha256 the bytes') still names the same run
    data = json.loads(path.read_text())
    data["source"] = {"kind": "tau2-results", "name": "results.json", "sha256": file_sha}
    assert import_ledger(data, target_kind="model", target="d").run.pk == old.pk
    assert BenchmarkRun.objects.count() == 1
