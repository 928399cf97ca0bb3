"""Secrets never stored: each rule of redact.py against realistic samples (and the look-alikes it must keep); the
corpus of secrets_corpus.py (real-looking secrets of each provider, drawn at random in their formats, under several
seeds, and look-alikes: git SHAs, UUIDs, digests, base64 of plain text, paths) for recall and false positives; the
detect-secrets ruleset accounted for; cost and linear time; then the fixtures' planted secrets captured through a
real server with the memory plugin, looked for in the archive (gunzipped), in the memory plugin's files and search
answers (the index), and in the server's log."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from sessions_testkit import (CLAUDE_SESSION, CODEX_SESSION, PLANTED, REDACTIONS, archived, capture, fixture_lines, serve,
                      socket_client)
from persmem_core.sdk.testing import write_config
from persmem_sessions import named_secrets, secret_rules
from persmem_sessions.redact import redact, redact_line
from secrets_corpus import look_alikes, secret_samples

# (rule, text holding one secret, the secret) -- shapes as the providers issue them (values invented)
SAMPLES = [
    ("openai_key", "OPENAI key: sk-proj-4fQz9LmWx2TyUiOpAsDfGhJkL0987poiuYTrewqZxCv", "sk-proj-4fQz9LmWx2TyUiOpAsDfGhJkL0987poiuYTrewqZxCv"),
    ("openai_key", "legacy sk-Zq81LmQwErTyUiOpAsDfT3BlbkFJGhJkL0987poiuYTrewq in a notebook", "sk-Zq81LmQwErTyUiOpAsDfT3BlbkFJGhJkL0987poiuYTrewq"),
    ("anthropic_key", "x-api-key: sk-ant-api03-Qw8rTy2UiOp4AsDf6GhJk8LzXc0VbNm2-AbCdEfGhIjKl_0123456789", "sk-ant-api03-Qw8rTy2UiOp4AsDf6GhJk8LzXc0VbNm2-AbCdEfGhIjKl_0123456789"),
    ("aws_access_key", "aws_access_key_id = AKIA4Q7VXK2PLEXAMPL3", "AKIA4Q7VXK2PLEXAMPL3"),
    ("aws_access_key", '"AccessKeyId": "ASIAY34FZKBOKMUTVV7A",', "ASIAY34FZKBOKMUTVV7A"),
    ("aws_secret_key", '"SecretAccessKey": "9drTJvcXLB89EXAMPLELB8923FB892xMFI6zj3Kc",', "9drTJvcXLB89EXAMPLELB8923FB892xMFI6zj3Kc"),
    ("github_token", "git clone https://ghp_R7cXq2LmN9pQ4sT6vW8yZ0aB1cD3eF5gH7iJ@github.com/x/y", "ghp_R7cXq2LmN9pQ4sT6vW8yZ0aB1cD3eF5gH7iJ"),
    ("github_token", "GH_TOKEN: gho_16C7e42F292c6912E7710c838347Ae178B4a", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("github_token", "token github_pat_11ABCDEFG0Zq81LmQwErTy_UiOpAsDfGhJkL0987poiuYTrewqZxCvBnM", "github_pat_11ABCDEFG0Zq81LmQwErTy_UiOpAsDfGhJkL0987poiuYTrewqZxCvBnM"),
    ("gitlab_token", "PRIVATE-TOKEN header glpat-Xy7Zq2Lm9Np4Qr6St8Uv", "glpat-Xy7Zq2Lm9Np4Qr6St8Uv"),
    ("slack_token", "SLACK_BOT xoxb-2026114030-5551234567890-Zx81LmQwErTyUiOpAsDfGhJk", "xoxb-2026114030-5551234567890-Zx81LmQwErTyUiOpAsDfGhJk"),
    ("slack_token", "user token xoxp-2026114030-5551234567-5551234567890-0a1b2c3d4e5f60718293a4b5c6d7e8f9", "xoxp-2026114030-5551234567-5551234567890-0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
    ("google_api_key", "maps?key=AIzaSyD4fQz9LmWx2TyUiOpAsDfGhJkL0987poi&q=x", "AIzaSyD4fQz9LmWx2TyUiOpAsDfGhJkL0987poi"),
    ("stripe_key", "Stripe.api_key = sk_live_51HxQ2bLkZ9aYc3Pq7RtUvWxYz0A1B2C3D4", "sk_live_51HxQ2bLkZ9aYc3Pq7RtUvWxYz0A1B2C3D4"),
    ("stripe_key", "restricted rk_live_51HxQ2bLkZ9aYc3Pq7RtUvWxYz", "rk_live_51HxQ2bLkZ9aYc3Pq7RtUvWxYz"),
    ("persmem_token", "Authorization header for persmem: pm_q3Zx81LmQwErTyUiOpAsDfGhJkL0987poiuYTrewq", "pm_q3Zx81LmQwErTyUiOpAsDfGhJkL0987poiuYTrewq"),
    ("jwt", 'curl -H "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl" https://x', "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"),
    ("authorization", "Authorization: Basic ZGVwbG95OmNvcnJlY3QtaG9yc2U=", "ZGVwbG95OmNvcnJlY3QtaG9yc2U="),
    ("authorization", "requests.get(url, headers=h)  # bearer 8f3a9c2e71d04b6a9e5f1c7d3b2a8e6f", "8f3a9c2e71d04b6a9e5f1c7d3b2a8e6f"),
    ("url_password", "DATABASE_URL=postgres://ledger:Tr0ub4dor-and-3@db.internal:5432/ledger", "Tr0ub4dor-and-3"),
    ("url_password", "redis://:s3cr3tRedisPass@cache:6379/0", "s3cr3tRedisPass"),
    ("private_key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7x9Zq\nq3Zx81LmQwEr==\n-----END RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA7x9Zq"),
    ("private_key", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGXq3ZxBCAC7\n=Zq81\n-----END PGP PRIVATE KEY BLOCK-----", "lQOYBGXq3ZxBCAC7"),
    ("private_key", "cut off: -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIGq3Zx81LmQwErTyUiOp", "MHcCAQEEIGq3Zx81LmQwErTyUiOp"),
    ("assignment", "export DB_PASSWORD=correct-horse-battery", "correct-horse-battery"),
    ("stripe_key", "STRIPE_WEBHOOK_SECRET=whsec_9fJk2LmN4pQr6StUv8WxYz0Ab", "whsec_9fJk2LmN4pQr6StUv8WxYz0Ab"),
    ("assignment", "  password: hunter2hunter2\n  user: app", "hunter2hunter2"),
    ("assignment", '{"client_secret": "Zq81-LmQw-ErTy-UiOp"}', "Zq81-LmQw-ErTy-UiOp"),
    ("assignment", "api_key = 'f3a9c2e71d04b6a9e5f1'", "f3a9c2e71d04b6a9e5f1"),
    ("assignment", 'mysql_passwd="Sup3r-S3cret!"', "Sup3r-S3cret!"),
    ("assignment", "PRIVATE_KEY=0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318", "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"),
    ("assignment", "AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD", "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD"),
    ("assignment", 'auth_token = \\"r3d1s-Auth-T0ken-2026-staging\\"', "r3d1s-Auth-T0ken-2026-staging"),
]

KEPT = [
    "max_tokens: 4096", "TOKENIZERS_PARALLELISM=false", "input_tokens = 1200", "pip install scikit-learn sk-learn",
    "git checkout task-management-feature-branch-12345", "PASSWORD_MIN_LENGTH=12", "SECRET_ROTATION=true",
    "the token bucket refills every second", "Bearer tokens expire after an hour", "see https://example.com/a:b@c",
    "AKIA is the prefix of AWS access key ids", "password: null",
]


class TestEachRule:
    @pytest.mark.parametrize(("rule", "text", "secret"), SAMPLES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(SAMPLES)])
    def test_the_secret_is_replaced_and_counted(self, rule, text, secret):
        cleaned, count = redact(text)
        assert secret not in cleaned and f"[REDACTED:{rule}]" in cleaned and count >= 1, cleaned

    @pytest.mark.parametrize("text", KEPT)
    def test_look_alikes_are_kept(self, text):
        assert redact(text) == (text, 0)

    def test_a_json_line_stays_valid_json_and_its_field_names_count(self):
        line = json.dumps({"type": "user", "message": {"content": "my token ghp_R7cXq2LmN9pQ4sT6vW8yZ0aB1cD3eF5gH7iJ"},
                           "input": {"password": "hunter2hunter2", "timeout": 30}})
        cleaned, count = redact_line(line)
        value = json.loads(cleaned)
        assert count == 2 and value["input"] == {"password": "[REDACTED:assignment]", "timeout": 30}
        assert "ghp_" not in cleaned

    def test_a_secret_split_by_json_escapes_is_found(self):
        key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n-----END OPENSSH PRIVATE KEY-----"
        cleaned, count = redact_line(json.dumps({"output": json.dumps({"output": key, "metadata": {}})}))
        assert count == 1 and "b3BlbnNzaC1rZXktdjE" not in cleaned

    def test_a_line_without_secrets_is_kept_byte_for_byte(self):
        line = '{"type": "user",  "message": {"content": "plain words"}}'
        assert redact_line(line) == (line, 0)

    def test_a_huge_line_is_redacted_in_linear_time(self):
        started = time.monotonic()
        cleaned, count = redact("iVBORw0KGgo" * 200_000 + " sk-ant-api03-Qw8rTy2UiOp4AsDf6GhJk8LzXc0VbNm2")
        assert count == 1 and time.monotonic() - started < 5

    @pytest.mark.parametrize("unit", [
        "a=b?k=v&x=y;", "//x/ //y/:_authToken ", "https://u:p", "eyJhbGci.eyJzdWIi.", "12345678:" + "A" * 34 + " ",
        "Cookie: a=" + "b" * 15 + ";", "mysql -u x ", "x" * 31 + "-us1", "M" + "a" * 24 + "." + "b" * 6 + ".",
        "token = f(", "password: ", "--api-key ", "bearer ", "AccountKey=" + "A" * 87 + " ", "xoxb-1-1-",
        "-----BEGIN RSA PRIVATE KEY----- ", "SECRET_ACCESS_KEY=" + "A" * 39 + " ",
    ])
    def test_an_adversarial_megabyte_of_near_misses_takes_linear_time(self, unit):
        """Each unit is the start of what a rule looks for, repeated a megabyte long without a break: a rule that
        scans on after a near miss and starts again would take minutes."""
        text = unit * (1_000_000 // len(unit))
        started = time.monotonic()
        redact(text)
        redact_line(json.dumps({"type": "user", "message": {"content": text}}))
        assert time.monotonic() - started < 8, unit

    def test_a_secret_after_a_blank_written_as_an_escape_is_found_in_a_json_line(self):
        line = json.dumps({"type": "user", "message": {"content": "mysql\t-pS3cr3tPass -h db\nnext line"}})
        cleaned, count = redact_line(line)
        assert count == 1 and "S3cr3tPass" not in cleaned and "[REDACTED:mysql_password]" in cleaned

    def test_a_secret_written_with_json_unicode_escapes_is_found(self):
        line = '{"type": "user", "message": {"content": "key \\u0073k-ant-api03-Qw8rTy2UiOp4AsDf6GhJk8LzXc0VbNm2"}}'
        cleaned, count = redact_line(line)
        assert count == 1 and "Qw8rTy2UiOp4" not in cleaned and "[REDACTED:anthropic_key]" in cleaned

    def test_a_known_shape_under_a_secret_json_key_keeps_its_kind(self):
        key = "SG." + "a1B2c3D4e5F6g7H8i9J0kL" + "." + "m" * 20 + "N0pQ1rS2tU3vW4xY5zA6bC7"
        cleaned, count = redact_line(json.dumps({"api_key": key, "password": "hunter2hunter2"}))
        assert json.loads(cleaned) == {"api_key": "[REDACTED:sendgrid_key]", "password": "[REDACTED:assignment]"}
        assert count == 2


SEEDS = range(4)
CORPUS = [(seed, *sample) for seed in SEEDS for sample in secret_samples(seed)]
LOOK_ALIKES = sorted({text for seed in SEEDS for text in look_alikes(seed)})


class TestCorpus:
    """Recall and false positives on secrets_corpus.py: every provider's secret is gone and named, in every seed's
    draw; every look-alike comes through byte for byte."""

    @pytest.mark.parametrize(("seed", "provider", "kind", "text", "secret"), CORPUS,
                             ids=[f"{provider}-{seed}" for seed, provider, *_ in CORPUS])
    def test_each_providers_secret_is_gone_and_named(self, seed, provider, kind, text, secret):
        cleaned, count = redact(text)
        assert secret not in cleaned and f"[REDACTED:{kind}]" in cleaned and count >= 1, cleaned
        # and the same inside a transcript line (the plan made from the line, the string redacted within it)
        line = json.dumps({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": text}]}})
        cleaned_line, _ = redact_line(line)
        assert secret not in cleaned_line and f"[REDACTED:{kind}]" in cleaned_line

    @pytest.mark.parametrize("text", LOOK_ALIKES)
    def test_a_look_alike_is_kept(self, text):
        assert redact(text) == (text, 0)

    def test_the_secret_only_is_replaced_its_label_and_neighbours_stay(self):
        cleaned, _ = redact("DefaultEndpointsProtocol=https;AccountName=ledger;AccountKey=" + "Ab+/" * 22
                            + ";EndpointSuffix=core.windows.net")
        assert cleaned == ("DefaultEndpointsProtocol=https;AccountName=ledger;AccountKey=[REDACTED:azure_storage_key];"
                           "EndpointSuffix=core.windows.net")
        # a .env line's value runs to the first blank; a shell word's stops where the shell's would (`;`, `&`, `|`)
        cleaned, _ = redact("DB_PASSWORD=a#b,c;d\ncd app && DB_PASSWORD=a#b,c ./run; DB_PASSWORD=x1y2z3w4; ./next")
        assert cleaned == ("DB_PASSWORD=[REDACTED:assignment]\ncd app && DB_PASSWORD=[REDACTED:assignment] ./run; "
                           "DB_PASSWORD=[REDACTED:assignment]; ./next")
        cleaned, _ = redact("Set-Cookie: sid=" + "s3ss10n" * 4 + "; Path=/very/long/path/for/cookies; HttpOnly")
        assert cleaned == "Set-Cookie: sid=[REDACTED:cookie]; Path=/very/long/path/for/cookies; HttpOnly"


class TestTheRuleset:
    def test_every_detect_secrets_plugin_is_used_or_left_out_with_a_reason(self):
        """An upgrade of detect-secrets that adds or changes a plugin shows up here, to be looked at: a new plugin is
        used as it comes (named after its secret_type), a changed one may need its kinds list updated."""
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

        installed = get_mapping_from_secret_type_to_class()
        for secret_type, plugin in installed.items():
            assert (secret_type in secret_rules._DETECT_SECRETS) != (secret_type in secret_rules._DETECT_SECRETS_LEFT_OUT), \
                secret_type
            if secret_type in secret_rules._DETECT_SECRETS:  # one kind for all its patterns, or one for each
                assert len(secret_rules._DETECT_SECRETS[secret_type][0]) in (1, len(plugin.denylist)), secret_type
        assert set(secret_rules._DETECT_SECRETS) | set(secret_rules._DETECT_SECRETS_LEFT_OUT) == set(installed)
        origins = {rule.origin for rule in secret_rules.rules()}
        assert sum(origin.startswith("detect-secrets") for origin in origins) == len(secret_rules._DETECT_SECRETS)

    def test_a_typical_turn_costs_about_a_millisecond(self):
        """A 4 KB tool result of source code full of token/secret names (the costliest kind of turn for the
        name=value rules) and a 1 KB answer, as Claude Code writes them; CPU time, the best of 30 (the box is shared).
        Measured on the 2-core dev box: about 0.2 ms for the answer, 1 ms for the source (the rules before
        detect-secrets: 0.75 and 2.2 ms)."""
        source = Path(named_secrets.__file__).read_text()[-4000:]
        assert len(source) == 4000
        prose = "The reconciliation job failed because the ledger export ran before the bank statement arrived. " * 10
        for text, budget in ((source, 4.0), (prose, 1.5)):
            line = json.dumps({"parentUuid": "00000000-0000-4000-8000-000000000001", "type": "user", "cwd": "/srv/app",
                               "sessionId": "7f3c2a10-5b8e-4c1d-9a2f-6e4b8d0c1a23", "timestamp": "2026-11-02T09:14:02Z",
                               "message": {"role": "user", "content": [{"type": "tool_result", "content": text}]}})
            redact_line(line)
            times = []
            for _ in range(30):
                started = time.process_time()
                redact_line(line)
                times.append(time.process_time() - started)
            assert min(times) * 1000 < budget, (min(times), statistics.median(times))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """kite's two fixture sessions captured through a server with the memory plugin, and indexed. Encryption at
    rest is off here, so a byte search of the memory plugin's files sees what redaction left in them (sealed, a
    search would find nothing whatever was stored: test_sessions_encryption.py checks sealing)."""
    home = tmp_path_factory.mktemp("redaction") / "home"
    write_config(home, {"encryption": {"enabled": False}})
    running = serve(home, memory=True)
    with socket_client(running.home, "kite") as http:
        for name, session, client in (("claude_session.jsonl", CLAUDE_SESSION, "claude"),
                                      ("codex_rollout.jsonl", CODEX_SESSION, "codex")):
            assert capture(http, fixture_lines(name), session_id=session, client=client).status_code == 200
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the indexing worker hands the turns to the memory plugin
        metas = [archived(running.home, "kite", c, s)[1] for c, s in (("claude", CLAUDE_SESSION),
                                                                    ("codex", CODEX_SESSION))]
        if all(m["indexed_lines"] == m["lines"] for m in metas):
            break
        time.sleep(0.2)
    yield running
    running.stop()


class TestNothingStoredThroughTheServer:

    def test_no_planted_secret_is_in_the_archive_and_the_meta_counts_them(self, server):
        for name, session, client in (("claude_session.jsonl", CLAUDE_SESSION, "claude"),
                                      ("codex_rollout.jsonl", CODEX_SESSION, "codex")):
            text, meta = archived(server.home, "kite", client, session)
            assert [s for s in PLANTED[name] if s in text] == []
            assert meta["redactions"] == REDACTIONS[name]
            for line in text.splitlines():
                json.loads(line)  # still the client's JSONL

    def test_no_planted_secret_is_in_the_index(self, server):
        results = []
        for query in ("stripe webhook secret env file", "github token aws key rotate", "slack bot token anthropic key",
                      "terraform redis auth token", "git push gitlab deploy", "openssh private key deploy",
                      "curl authorization bearer ledger health", "database url postgres password"):
            results += server.call_tool("session_search", {"query": query, "top_k": 20}, agent="kite")["results"]
        found = json.dumps(results)
        assert "REDACTED" in found  # the turns that held them were indexed, redacted
        assert [s for name in PLANTED for s in PLANTED[name] if s in found] == []
        stored = b"".join(p.read_bytes() for p in (server.home / "memory").rglob("*") if p.is_file())
        assert b"reconciliation" in stored  # the memory files hold the turns' words as they are
        assert [s for name in PLANTED for s in PLANTED[name] if s.encode() in stored] == []

    def test_no_planted_secret_is_in_the_server_log(self, server):
        log = server.log()
        assert [s for name in PLANTED for s in PLANTED[name] if s in log] == []
