"""Turns out of real transcript formats (fixtures/: Claude Code 2.0.x JSONL, Codex CLI rollout JSONL): every user
prompt, answer, tool call and tool result, and nothing of the clients' own bookkeeping (thinking, reasoning,
UI events, injected context), the same turns however the lines are batched, tool outputs cut to the setting;
and the project a working folder gives."""

from __future__ import annotations

import json
import subprocess

import pytest

from sessions_testkit import CLAUDE_SESSION, CODEX_SESSION, fixture_lines
from persmem_sessions.projects import normalise, project_for
from persmem_sessions.transcripts import line_turns, transcript_cwd, transcript_session_id


def turns_of(client: str, lines: list[str], chars: int = 2000) -> list[dict]:
    return [turn for line in lines for turn in line_turns(client, line, chars)]


class TestClaudeCode:
    def test_prompts_answers_tool_calls_and_results_in_order(self):
        turns = turns_of("claude", fixture_lines("claude_session.jsonl"))
        assert [t["role"] for t in turns] == ["user", "assistant", "tool", "tool", "tool", "tool", "tool", "tool",
                                             "assistant", "user", "assistant"]
        assert turns[0]["text"].startswith("The webhook tests fail") and turns[0]["time"] == "2026-11-02T09:14:02.120Z"
        assert turns[2]["text"].startswith('call Bash: {"command":"cat .env"')
        assert turns[3]["text"].startswith("result: DATABASE_URL=")
        assert turns[5]["text"] == 'result: {"status":"degraded","reconciliation":"webhook signature mismatch"}'

    def test_meta_thinking_summary_system_and_snapshots_give_no_turns(self):
        texts = json.dumps(turns_of("claude", fixture_lines("claude_session.jsonl")))
        for bookkeeping in ("local-command-caveat", "Look at the env file first", "Rotate the Stripe webhook",
                            "Conversation compacted", "trackedFileBackups"):
            assert bookkeeping not in texts

    def test_session_id_and_cwd_come_from_the_lines(self):
        lines = fixture_lines("claude_session.jsonl")
        assert transcript_session_id("claude", lines) == CLAUDE_SESSION
        assert transcript_cwd("claude", lines) == "/home/dev/src/billing-api"


class TestCodex:
    def test_prompts_answers_tool_calls_and_results_in_order(self):
        turns = turns_of("codex", fixture_lines("codex_rollout.jsonl"))
        assert [t["role"] for t in turns] == ["user", "tool", "tool", "tool", "tool", "assistant", "user", "tool",
                                             "tool"]
        assert turns[0]["text"].startswith("Why does the staging terraform plan")
        assert turns[1]["text"].startswith('call shell: {"command":["bash","-lc","terraform')
        assert turns[2]["text"].startswith("result: # aws_elasticache_replication_group.redis must be replaced")
        assert turns[3]["text"].startswith("call apply_patch: *** Begin Patch")
        assert turns[4]["text"] == "result: Success. Updated the following files:\nM envs/staging/redis.tf\n"
        assert turns[-1]["text"].startswith("result: Exit code: 0")

    def test_injected_context_reasoning_and_ui_events_give_no_turns(self):
        turns = turns_of("codex", fixture_lines("codex_rollout.jsonl"))
        texts = json.dumps(turns)
        for bookkeeping in ("environment_context", "user_instructions", "Inspecting the plan", "total_token_usage"):
            assert bookkeeping not in texts
        assert sum("Why does the staging" in t["text"] for t in turns) == 1  # event_msg repeats it: counted once

    def test_session_id_and_cwd_come_from_session_meta(self):
        lines = fixture_lines("codex_rollout.jsonl")
        assert transcript_session_id("codex", lines) == CODEX_SESSION
        assert transcript_cwd("codex", lines) == "/home/dev/src/infra"


class TestAnyBatching:
    @pytest.mark.parametrize("name,client", [("claude_session.jsonl", "claude"), ("codex_rollout.jsonl", "codex")])
    def test_turns_do_not_depend_on_how_lines_are_split(self, name, client):
        lines = fixture_lines(name)
        whole = turns_of(client, lines)
        for cut_at in range(len(lines)):
            assert turns_of(client, lines[:cut_at]) + turns_of(client, lines[cut_at:]) == whole

    def test_tool_output_is_cut_to_the_setting_and_says_so(self):
        line = json.dumps({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "x" * 50_000}]}})
        [turn] = line_turns("claude", line, 300)
        assert len(turn["text"]) < 400 and "50,008 characters in all" in turn["text"]

    @pytest.mark.parametrize("line", ["", "not json", "[1,2]", "null", '{"type":"user"}', '{"type":"user","message":7}',
                                      '{"type":"assistant","message":{"content":[1,null,{"type":"tool_use"}]}}',
                                      '{"type":"response_item","payload":{"type":"message","content":"x"}}'])
    def test_odd_lines_give_no_turn_or_a_harmless_one(self, line):
        for client in ("claude", "codex"):
            for turn in line_turns(client, line, 100):
                assert set(turn) == {"role", "text", "time"}


class TestProjects:
    def test_the_longest_mapped_folder_wins(self):
        mapping = {"/home/me/src": "Everything", "/home/me/src/infra": "Infra Team"}
        assert project_for("/home/me/src/infra/modules/redis", mapping) == "infra-team"
        assert project_for("/home/me/src/other", mapping) == "everything"
        assert project_for("/home/me/srcx", mapping) == "srcx"

    def test_the_git_root_names_the_project(self, tmp_path):
        repo = tmp_path / "Billing API"
        (repo / "src" / "deep").mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        deep = str(repo / "src" / "deep")
        assert project_for(deep, roots=[str(tmp_path)]) == "billing-api"  # inside a workspace root: the disk says
        assert project_for(deep, repo=str(repo)) == "billing-api"  # elsewhere: the root the client's hook found
        assert project_for(deep) == "deep"  # and nothing read from the server's disk outside the roots (issue 32)

    def test_else_the_folder_name_and_general_for_nothing(self, tmp_path):
        assert project_for(str(tmp_path / "Plain Folder")) == "plain-folder"
        for cwd in ("", "relative/path", "/"):
            assert project_for(cwd) == "general"
        assert normalise("../../etc") == "etc" and normalise("x" * 100) == "x" * 64
