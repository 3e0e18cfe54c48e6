"""Keys made with `manage.py create_key`: stored as a hash only, usable beside
MODEL_API_KEYS at once, refused once revoked, names checked."""
from __future__ import annotations

import io

import openai
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import ApiKey, Trace
from ledger.spend import keys as stored_keys
from passthru import auth
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina

HI = [{"role": "user", "content": "hi"}]


def _client(marina: InProcessMarina, key: str) -> openai.OpenAI:
    return marina.openai(key)


def test_a_made_key_works_at_once_beside_the_environments_keys(marina, upstream) -> None:
    secret = auth.create_key("alice")
    assert secret.startswith("sk-marina-") and len(secret) > 40
    row = ApiKey.objects.get()
    assert secret not in (row.name, row.digest, row.prefix) and secret.startswith(row.prefix)
    _client(marina, secret).chat.completions.create(model="openrouter/openai/gpt-5.2", messages=HI)
    _client(marina, MARINA_KEY).chat.completions.create(model="openrouter/openai/gpt-5.2", messages=HI)
    assert sorted(Trace.objects.values_list("key_name", flat=True)) == ["alice", "tester"]
    with pytest.raises(openai.AuthenticationError, match="Invalid API key"):
        _client(marina, secret + "x").chat.completions.create(model="openrouter/openai/gpt-5.2", messages=HI)


def test_stored_keys_alone_close_the_api(marina, marina_config) -> None:
    marina_config.MODEL_API_KEYS = ""
    marina_config.MARINA_OPEN_API = True  # would open it, were there no keys at all
    reply = marina.http.get("/v1/models")
    assert reply.status_code == 200  # open: no keys anywhere
    secret = auth.create_key("ci")
    reply = marina.http.get("/v1/models")
    assert reply.status_code == 401 and "Authorization" in reply.json()["error"]["message"]
    assert marina.http.get("/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code == 200


def test_a_closed_api_says_how_to_make_a_key(marina, marina_config) -> None:
    marina_config.MODEL_API_KEYS = ""
    reply = marina.http.get("/v1/models", headers={"Authorization": "Bearer sk-anything"})
    assert reply.status_code == 401 and "manage.py create_key NAME" in reply.json()["error"]["message"]


def test_a_revoked_key_is_refused(marina, monkeypatch) -> None:
    secret = auth.create_key("temp")
    headers = {"Authorization": f"Bearer {secret}"}
    assert marina.http.get("/v1/models", headers=headers).status_code == 200
    auth.revoke_key("temp")  # this process forgets at once
    assert marina.http.get("/v1/models", headers=headers).status_code == 401
    # Revoked elsewhere (another server): this process refuses it once its copy is stale.
    other = auth.create_key("other")
    headers = {"Authorization": f"Bearer {other}"}
    assert marina.http.get("/v1/models", headers=headers).status_code == 200
    assert stored_keys.revoke("other")
    monkeypatch.setattr(auth, "KEY_REFRESH_SECONDS", 0.0)
    assert marina.http.get("/v1/models", headers=headers).status_code == 401


@pytest.mark.parametrize(
    ("name", "problem"),
    [("has space", "letters, digits"), ("", "letters, digits"), ("x" * 65, "letters, digits"), ("open", "reserved"),
     ("demo-ci", "reserved"), ("key-1234", "reserved"), ("tester", "MODEL_API_KEYS already")],
)  # fmt: skip
def test_bad_names_are_refused(marina_config, db, name: str, problem: str) -> None:
    with pytest.raises(auth.KeyRefused, match=problem):
        auth.create_key(name)
    assert not ApiKey.objects.exists()


def test_a_name_stays_taken_after_revocation(db) -> None:
    auth.create_key("bob")
    auth.revoke_key("bob")
    with pytest.raises(auth.KeyRefused, match="exists already"):
        auth.create_key("bob")
    with pytest.raises(auth.KeyRefused, match="no active key named 'bob'"):
        auth.revoke_key("bob")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_new_keys_message_on_a_terminal_is_not_coloured_as_an_error(db) -> None:
    """Django colours stderr bold red on a terminal; making a key is a success."""
    err = _Terminal()
    call_command("create_key", "coloured", stdout=io.StringIO(), stderr=err, force_color=True)
    assert err.getvalue().startswith("\x1b[32;1mMade key 'coloured'")  # SUCCESS: green, not ERROR's 31 (red)
    assert "\x1b[31" not in err.getvalue()


def test_the_commands_print_the_secret_once_and_only_on_stdout(db) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_key", "nightly", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert secret.startswith("sk-marina-") and secret not in err.getvalue() and "revoke_key nightly" in err.getvalue()
    listing = io.StringIO()
    call_command("list_keys", stdout=listing)
    assert "nightly" in listing.getvalue() and "active" in listing.getvalue() and secret not in listing.getvalue()
    call_command("revoke_key", "nightly", stdout=io.StringIO())
    with pytest.raises(CommandError, match="no active key"):
        call_command("revoke_key", "nightly")
    with pytest.raises(CommandError, match="reserved"):
        call_command("create_key", "demo-x")
