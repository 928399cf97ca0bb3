"""The OAuth store (persmem_core/auth/oauth/store.py) on a real home folder: secrets only hashed, codes single use
even when two exchanges race, refresh rotation with replay detection, tokens bound to the agent's identity and
to this server's resource, expiry, revocation, the operator's credential, and two store instances (the server
and the CLI) seeing each other's changes. Pure Python: the endpoints that call this are tested elsewhere."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from persmem_core.auth.agents import AgentStore
from persmem_core.errors import UserError
from persmem_core.auth.oauth.records import ClientRecord
from persmem_core.auth.oauth.store import GrantError, OAuthStore
from persmem_core.settings import OAuthConfig

RESOURCE = "https://memory.example.org/mcp"
CLIENT = "https://claude.ai/oauth/mcp-oauth-client-metadata"


def new_store(home, **config) -> OAuthStore:
    return OAuthStore(home, AgentStore(home), lambda: OAuthConfig(**config))


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    AgentStore(home).add("kite")
    AgentStore(home).add("wren")
    return home


def issue(store: OAuthStore, agent: str = "kite", client_id: str = CLIENT) -> str:
    return store.issue_code(client_id=client_id, client_name="Claude", redirect_uri="https://claude.ai/api/cb",
                            redirect_uri_explicit=True, code_challenge="x" * 43, resource=RESOURCE, scopes=[],
                            agent=agent)


def grant_tokens(store: OAuthStore, agent: str = "kite", client_id: str = CLIENT):
    return store.exchange_code(issue(store, agent, client_id), client_id)


def invalid_grant(call, *args) -> str:
    with pytest.raises(GrantError) as caught:
        call(*args)
    assert caught.value.error == "invalid_grant"
    return caught.value.description


def test_only_hashes_of_secrets_reach_the_file(home):
    store = new_store(home)
    code = issue(store)
    first = store.exchange_code(code, CLIENT)
    second = store.refresh(first.refresh_token, CLIENT)
    store.set_operator_password("correct horse battery staple")
    approval = store.new_approval_code()
    text = (home / "oauth.json").read_text()
    secrets = [code, first.access_token, first.refresh_token, second.access_token, second.refresh_token,
               "correct horse battery staple", approval, approval.replace("-", "")]
    for secret in secrets:
        assert secret not in text
        assert secret[5:] not in text  # not even without the pmat_/pmrt_ prefix
    assert json.loads(text)["operator"]["password_scrypt"].startswith("scrypt$16384$8$1$")
    assert stat.S_IMODE(os.stat(home / "oauth.json").st_mode) == 0o600
    assert store.agent_for_access_token(second.access_token, RESOURCE) == "kite"


def test_a_code_works_once_and_its_replay_ends_the_grant(home):
    store = new_store(home)
    code = issue(store, "wren")
    assert store.code(code).agent == "wren" and not store.code(code).used
    tokens = store.exchange_code(code, CLIENT)
    assert store.agent_for_access_token(tokens.access_token, RESOURCE) == "wren"
    assert store.code(code).used  # still known, so the token endpoint recognises a replay
    assert "already used" in invalid_grant(store.exchange_code, code, CLIENT)
    assert store.agent_for_access_token(tokens.access_token, RESOURCE) is None
    assert "replayed" in store.grants()[0].revoked_reason
    assert "refresh" not in invalid_grant(store.refresh, tokens.refresh_token, CLIENT)  # the grant is over


def test_a_code_of_another_client_or_unknown_gives_nothing(home):
    store = new_store(home)
    code = issue(store)
    assert "another client" in invalid_grant(store.exchange_code, code, "some-other-client")
    assert "unknown or expired" in invalid_grant(store.exchange_code, "not-a-code", CLIENT)
    assert store.grants() == []
    store.exchange_code(code, CLIENT)  # the wrong client did not spend it


def test_two_exchanges_racing_for_one_code_one_wins(home):
    # two store instances, as two server workers or processes would hold: the flock decides
    stores = [new_store(home), new_store(home)]
    for _ in range(8):
        code = issue(stores[0])
        barrier = threading.Barrier(2)
        outcomes = []

        def exchange(store, code=code, barrier=barrier, outcomes=outcomes):
            barrier.wait()
            try:
                outcomes.append(store.exchange_code(code, CLIENT))
            except GrantError as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=exchange, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(type(o).__name__ for o in outcomes) == ["GrantError", "TokenSet"]
        assert next(o for o in outcomes if isinstance(o, GrantError)).error == "invalid_grant"
    assert len(stores[1].grants()) == 8  # one grant per code, never two


def test_refresh_rotates_and_a_spent_refresh_token_ends_the_grant(home):
    store = new_store(home)
    first = grant_tokens(store)
    second = store.refresh(first.refresh_token, CLIENT)
    assert {second.access_token, second.refresh_token}.isdisjoint({first.access_token, first.refresh_token})
    assert second.grant_id == first.grant_id and second.expires_in == 3600
    grant, spent = store.refresh_grant(first.refresh_token)
    assert spent and grant.grant_id == first.grant_id
    assert store.refresh_grant(second.refresh_token)[1] is False
    assert store.grants()[0].last_refreshed is not None
    third = store.refresh(second.refresh_token, CLIENT)
    assert store.agent_for_access_token(third.access_token, RESOURCE) == "kite"

    # someone else holds the first refresh token: presenting it ends the grant for everyone
    assert "already used" in invalid_grant(store.refresh, first.refresh_token, CLIENT)
    assert store.agent_for_access_token(third.access_token, RESOURCE) is None
    assert "ended" in invalid_grant(store.refresh, third.refresh_token, CLIENT)
    assert store.grants()[0].revoked_reason == "refresh token replayed"
    assert store.refresh_grant("pmrt_unknown") is None


def test_refresh_by_another_client_is_refused_and_changes_nothing(home):
    store = new_store(home)
    tokens = grant_tokens(store)
    assert "another client" in invalid_grant(store.refresh, tokens.refresh_token, "other")
    assert store.refresh(tokens.refresh_token, CLIENT).grant_id == tokens.grant_id


def test_a_token_works_only_for_this_servers_resource(home):
    store = new_store(home)
    tokens = grant_tokens(store)
    assert store.agent_for_access_token(tokens.access_token, RESOURCE) == "kite"
    assert store.agent_for_access_token(tokens.access_token, "https://other.example.org/mcp") is None
    assert store.agent_for_access_token(tokens.refresh_token, RESOURCE) is None  # a refresh token is no access token
    assert store.agent_for_access_token("pm_" + tokens.access_token[5:], RESOURCE) is None


def test_agent_revoked_and_added_again_is_another_agent(home):
    store = new_store(home)
    agents = AgentStore(home)  # as the CLI: another instance
    tokens = grant_tokens(store)
    code = issue(store)  # approved, not exchanged yet
    agents.revoke("kite")
    assert store.agent_for_access_token(tokens.access_token, RESOURCE) is None
    agents.add("kite")  # the same name, a new agent: kite's old OAuth tokens must not come back
    assert store.agent_for_access_token(tokens.access_token, RESOURCE) is None
    assert store.access_grant(tokens.access_token) is None
    assert "no longer exists" in invalid_grant(store.exchange_code, code, CLIENT)
    assert "revoked" in invalid_grant(store.refresh, tokens.refresh_token, CLIENT)
    with pytest.raises(UserError, match="no active agent named 'ghost'"):
        issue(store, "ghost")


def test_revoke_agent_ends_only_that_agents_grants(home):
    store = new_store(home)
    kite, kite2, wren = grant_tokens(store), grant_tokens(store), grant_tokens(store, "wren")
    ended = store.revoke_agent("kite")
    assert sorted(g.grant_id for g in ended) == sorted([kite.grant_id, kite2.grant_id])
    assert all(g.revoked_reason == "agent revoked" for g in ended)
    assert store.agent_for_access_token(kite.access_token, RESOURCE) is None
    assert store.agent_for_access_token(wren.access_token, RESOURCE) == "wren"
    assert store.revoke_agent("kite") == []


def test_lifetimes_come_from_the_config(home):
    store = new_store(home, access_token_seconds=1, code_seconds=1, refresh_token_days=1.5 / 86400)
    tokens = grant_tokens(store)
    code = issue(store)
    assert tokens.expires_in == 1
    time.sleep(1.1)
    assert store.agent_for_access_token(tokens.access_token, RESOURCE) is None
    assert store.code(code) is None
    assert "expired" in invalid_grant(store.exchange_code, code, CLIENT)
    fresh = store.refresh(tokens.refresh_token, CLIENT)  # the refresh token (1.5 s) still works
    assert store.agent_for_access_token(fresh.access_token, RESOURCE) == "kite"
    time.sleep(1.6)
    assert "lapsed" in invalid_grant(store.refresh, fresh.refresh_token, CLIENT)
    store.new_approval_code()  # any write prunes: the expired code and access tokens are gone from the file
    on_file = json.loads((home / "oauth.json").read_text())
    assert on_file["codes"] == {}
    assert all(grant["access"] == [] for grant in on_file["grants"].values())


def test_operator_revokes_by_grant_id_or_client_id(home):
    store = new_store(home)
    one, two = grant_tokens(store), grant_tokens(store)
    other = grant_tokens(store, client_id="dcr-client")
    ended = store.revoke(one.grant_id)
    assert [g.grant_id for g in ended] == [one.grant_id] and ended[0].revoked_reason == "operator"
    assert store.agent_for_access_token(one.access_token, RESOURCE) is None
    assert store.agent_for_access_token(two.access_token, RESOURCE) == "kite"
    with pytest.raises(UserError, match="no live grant"):
        store.revoke(one.grant_id)
    assert [g.grant_id for g in store.revoke(CLIENT)] == [two.grant_id]
    assert store.agent_for_access_token(other.access_token, RESOURCE) == "kite"
    with pytest.raises(UserError, match="no OAuth grant or client 'nobody'.*oauth clients"):
        store.revoke("nobody")


def test_a_client_revokes_its_own_tokens_only(home):
    store = new_store(home)
    mine, theirs = grant_tokens(store), grant_tokens(store, client_id="dcr-client")
    assert store.revoke_token(theirs.access_token, CLIENT) is False  # another client's token: left alone
    assert store.agent_for_access_token(theirs.access_token, RESOURCE) == "kite"
    assert store.revoke_token("pmat_unknown", CLIENT) is False
    assert store.revoke_token(mine.refresh_token, CLIENT) is True
    assert store.agent_for_access_token(mine.access_token, RESOURCE) is None
    assert store.access_grant(theirs.access_token).client_id == "dcr-client"


def test_operator_passphrase_and_single_use_approval_codes(home):
    store = new_store(home)
    assert not store.has_operator_credential()
    assert not store.check_operator("anything at all")
    code = store.new_approval_code(minutes=5)
    assert len(code) == 14 and code.count("-") == 2
    assert store.has_operator_credential()
    assert store.check_operator(f" {code.lower().replace('-', '')} ")  # typed by a person: case and dashes free
    assert not store.check_operator(code)  # used up
    assert not store.has_operator_credential()
    with pytest.raises(UserError, match="at least 12 characters"):
        store.set_operator_password("short")
    store.set_operator_password("correct horse battery staple")
    assert store.has_operator_credential()
    assert store.check_operator("correct horse battery staple")
    assert store.check_operator("correct horse battery staple")  # a passphrase is not used up
    assert not store.check_operator("correct horse battery stapl")
    assert not store.check_operator("x" * 5000)
    assert not store.check_operator(None)


def test_the_cli_and_the_server_see_each_others_changes(home):
    server, cli = new_store(home), new_store(home)
    tokens = grant_tokens(server)
    assert server.agent_for_access_token(tokens.access_token, RESOURCE) == "kite"  # indexed
    cli.revoke(tokens.grant_id)
    assert server.agent_for_access_token(tokens.access_token, RESOURCE) is None  # re-read at once
    code = issue(cli)
    assert server.exchange_code(code, CLIENT)
    assert cli.code(code).used
    approval = cli.new_approval_code()
    assert server.check_operator(approval)
    assert not cli.check_operator(approval)


def test_registration_is_capped_and_unused_clients_are_dropped(home):
    store = new_store(home, max_clients=2)
    store.register_client(ClientRecord(client_id="old-unused"))
    store.register_client(ClientRecord(client_id="old-granted"))
    grant_tokens(store, client_id="old-granted")
    on_file = json.loads((home / "oauth.json").read_text())  # two days pass
    for client in on_file["clients"].values():
        client["registered"] = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    (home / "oauth.json").write_text(json.dumps(on_file))
    store.register_client(ClientRecord(client_id="new", client_name="New"))  # "old-unused" made room
    assert sorted(c.client_id for c in store.clients()) == ["new", "old-granted"]
    assert store.client("new").registered and store.client("new").client_name == "New"
    store.register_client(ClientRecord(client_id="newer"))  # full: the oldest client without a grant makes room
    assert sorted(c.client_id for c in store.clients()) == ["newer", "old-granted"]
    grant_tokens(store, client_id="newer")
    with pytest.raises(GrantError) as caught:  # every client has a grant: nothing is pushed out
        store.register_client(ClientRecord(client_id="one-too-many"))
    assert caught.value.error == "invalid_client_metadata" and "max_clients" in caught.value.description
    assert store.client("one-too-many") is None


def test_a_damaged_file_is_a_clear_error(home):
    (home / "oauth.json").write_text('{"grants": {"g_1": 42}')
    store = new_store(home)
    with pytest.raises(UserError, match="OAuth registry is damaged.*Restore it from a backup"):
        store.agent_for_access_token("pmat_x", RESOURCE)
    with pytest.raises(UserError, match="damaged"):
        store.new_approval_code()
