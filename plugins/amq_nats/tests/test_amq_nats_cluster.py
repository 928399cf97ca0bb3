"""Mail on a real three-node NATS JetStream cluster through two real persmem servers and real MCP clients: sent
through one node, read through the other (listings, unread counts and the live feed); two readers racing on two
nodes claim each message once; a NATS server killed with SIGKILL during a send loop loses no acknowledged message
and gives none to two readers; `persmem amq migrate` moves a Maildir (read and unread mail) into the cluster."""

import json
import shutil
import subprocess
import threading
import time

import anyio
import httpx2
import pytest

from persmem_core.sdk.testing import ToolCallError, clean_env, persmem_command, tool_result, write_config

from amq_nats_nodes import AGENTS, NO_MEMORY, mail_nodes, node_config

SEEN_WITHIN = 5.0  # seconds: how soon another node's view must show a delivery or a claim


def call(node, tool, caller, /, **args):
    return node.call_tool(tool, args, agent=caller)


def eventually(check, within: float = SEEN_WITHIN):
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_mail_sent_through_one_node_is_read_through_the_other(two_nodes):
    a, b, _ = two_nodes
    sent = call(a, "amq_send", "kite", to_agent="wren", body="from node a", subject="cross",
                kind="question")
    assert sent["status"] == "delivered"
    inbox = eventually(lambda: call(b, "amq_check", "wren")["messages"])
    assert [m["id"] for m in inbox] == [sent["id"]] and inbox[0]["kind"] == "question"
    assert eventually(lambda: httpx2.get(f"{b.base_url}/amq/unread", headers=b.headers("operator")).json()
                      ["unread"].get("wren") == 1)
    read = call(b, "amq_read", "wren", agent="", msg_id=sent["id"])
    assert read["body"] == "from node a" and read["claimed"] is True
    # node a sees the claim: read there too, and a second read there claims nothing
    assert eventually(lambda: call(a, "amq_history", "wren")["messages"][0]["status"] == "read")
    again = call(a, "amq_read", "wren", agent="", msg_id=sent["id"])
    assert again["claimed"] is False and again["status"] == "read"
    reply = call(b, "amq_reply", "wren", msg_id=sent["id"], body="answered on b")
    thread = eventually(lambda: call(a, "amq_thread", "kite", thread_id=sent["id"])["total"] == 2)
    assert thread and reply["thread"] == sent["id"]
    with pytest.raises(ToolCallError, match="reply_to 'nope' is not a message you can see"):
        call(b, "amq_send", "kite", to_agent="wren", body="x", reply_to="nope")


def test_the_live_feed_on_one_node_announces_mail_sent_through_the_other(two_nodes):
    a, b, _ = two_nodes
    found, ready = [], threading.Event()

    def listen():
        with httpx2.stream("GET", f"{b.base_url}/amq/events", headers=b.headers("wren"), timeout=20) as response:
            event = None
            for line in response.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    found.append((event, json.loads(line.split(":", 1)[1])))
                    ready.set()
                    if event == "message":
                        return

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    assert ready.wait(10)
    sent = call(a, "amq_send", "kite", to_agent="wren", body="live", subject="across nodes")
    reader.join(15)
    assert not reader.is_alive()
    assert found[-1][0] == "message" and found[-1][1]["id"] == sent["id"] and found[-1][1]["to"] == "wren"


def read_all(node, agent, ids, out, go):
    """Read every message of `ids` as `agent` in one MCP session once `go` is set; out[id] = claimed."""
    async def run():
        async with node.client(agent) as client:
            go.wait(30)
            for msg_id in ids:
                result = tool_result(await client.call_tool("amq_read", {"agent": "", "msg_id": msg_id}))
                out[msg_id] = result["claimed"]

    anyio.run(run)


def race_to_claim(a, b, ids) -> tuple[dict, dict]:
    """Two readers of wren's inbox, one per node, read every message at the same moment."""
    won_a, won_b, go = {}, {}, threading.Event()
    readers = [threading.Thread(target=read_all, args=(a, "wren", ids, won_a, go)),
               threading.Thread(target=read_all, args=(b, "wren", list(reversed(ids)), won_b, go))]
    for reader in readers:
        reader.start()
    time.sleep(1.0)  # both sessions open
    go.set()
    for reader in readers:
        reader.join(120)
    return won_a, won_b


def test_two_readers_racing_on_two_nodes_claim_each_message_once(two_nodes):
    a, b, _ = two_nodes
    ids = [call(a, "amq_send", "kite", to_agent="wren", body=f"race {n}")["id"] for n in range(30)]
    assert eventually(lambda: call(b, "amq_check", "wren")["new_count"] == 30)
    won_a, won_b = race_to_claim(a, b, ids)
    assert set(won_a) == set(won_b) == set(ids)
    assert all(won_a[i] != won_b[i] for i in ids), "a message claimed by both readers, or by neither"
    assert call(a, "amq_check", "wren")["new_count"] == 0


def test_sigkill_of_the_stream_leader_during_sends_loses_no_acknowledged_message(two_nodes):
    a, b, cluster = two_nodes
    acknowledged, refused, stop = [], [], threading.Event()

    def send_loop(node, tag):
        async def run():
            n = 0
            while not stop.is_set():
                async with node.client("kite") as client:  # a new session now and then, as clients do
                    for _ in range(25):
                        result = await client.call_tool("amq_send", {"to_agent": "wren",
                                                                     "body": f"{tag} {n}", "subject": f"{tag}{n}"})
                        n += 1
                        try:
                            acknowledged.append(tool_result(result)["id"])
                        except ToolCallError as exc:  # not acknowledged: allowed, if it says so clearly
                            assert "did not" in str(exc) or "try again" in str(exc), str(exc)
                            refused.append(str(exc))

        anyio.run(run)

    senders = [threading.Thread(target=send_loop, args=(node, tag)) for node, tag in ((a, "a"), (b, "b"))]
    for sender in senders:
        sender.start()
    time.sleep(2.0)
    before = len(acknowledged)
    leader = stream_leader(cluster)
    cluster.kill(leader)
    # Sends go on once JetStream has a new leader: a few seconds, more on a busy box (a CI run saw 6 s pass
    # with 10 sends acknowledged), so wait until they have, up to 30 s, then a little longer.
    resumed = eventually(lambda: len(acknowledged) > before + 10, within=30.0)
    time.sleep(2.0)
    stop.set()
    for sender in senders:
        sender.join(60)
    assert before > 0 and resumed and len(acknowledged) > before + 10, (before, len(acknowledged), refused[:3])
    print(f"acknowledged {before} before the kill of n{leader + 1}, {len(acknowledged)} in all; "
          f"refused {len(refused)}: {refused[:2]}")
    assert len(set(acknowledged)) == len(acknowledged)
    # every acknowledged message is in wren's inbox, on both nodes, once
    for node in (a, b):
        held = eventually(lambda node=node: _unread_ids(node, "wren") >= set(acknowledged), within=15)
        assert held, sorted(set(acknowledged) - _unread_ids(node, "wren"))[:5]
    won_a, won_b = race_to_claim(a, b, acknowledged)
    assert all(won_a[i] != won_b[i] for i in acknowledged), "a message claimed twice, or never"


def _unread_ids(node, agent) -> set[str]:
    """Every unread message's id (amq_check lists them all; amq_history stops at 1,000, and a fast machine sends
    more than that in the loop above)."""
    return {m["id"] for m in call(node, "amq_check", agent)["messages"]}


def stream_leader(cluster) -> int:
    """The index of the NATS server leading the mail stream."""
    import nats

    async def ask():
        nc = await nats.connect(**cluster.connect_options())
        try:
            return (await nc.jetstream().stream_info("PERSMEM_AMQ")).cluster.leader
        finally:
            await nc.close()

    name = anyio.run(ask)
    return [node.name for node in cluster.nodes].index(name)


def test_migrate_moves_a_maildir_with_read_and_unread_mail_into_the_cluster_and_backup_copies_it(tmp_path, nats_cluster):
    from persmem_amq_maildir.config import AmqConfig
    from persmem_amq_maildir.store import MailStore

    home = tmp_path / "home"
    maildir = MailStore(home / "amq", AmqConfig(agents=list(AGENTS))).open()
    ids = [maildir.send("kite", "wren", f"old mail {n}", subject=f"m{n}")["id"] for n in range(6)]
    ids.append(maildir.send("wren", "kite", "to kite", subject="k")["id"])
    for msg_id in ids[:2]:
        maildir.read("wren", "", msg_id)
    (home / "amq" / "wren" / "inbox" / "new" / "junk.md").write_text("not a message")

    def cli(*args):
        return subprocess.run(persmem_command(*args), env=clean_env(home, **NO_MEMORY), capture_output=True,
                              text=True, timeout=120)

    write_config(home, {"amq": {"agents": list(AGENTS)}})
    refused = cli("amq", "migrate")
    assert refused.returncode == 1 and "no mail backend other than the Maildir" in refused.stderr
    write_config(home, node_config(nats_cluster))
    first = cli("amq", "migrate")
    assert first.returncode == 0, first.stderr
    counts = json.loads(first.stdout.splitlines()[-1])
    assert (counts["copied"], counts["copied_read"], counts["marked_read"], counts["not_messages"]) == (7, 2, 2, 1)
    second = cli("amq", "migrate")
    counts = json.loads(second.stdout.splitlines()[-1])
    assert (counts["copied"], counts["already_there"], counts["marked_read"]) == (0, 7, 0)
    doctor = cli("doctor")
    assert "NATS JetStream: stream PERSMEM_AMQ: 7 message(s), 2 claimed, replicas 3" in doctor.stdout, doctor.stdout
    backup = cli("backup", str(tmp_path / "bk"))  # the cluster's mail, in the Maildir layout
    assert backup.returncode == 0, backup.stderr
    copies = {path.stem: path.parent.name for path in (tmp_path / "bk").rglob("*.md")}
    assert copies == {i: "cur" if i in ids[:2] else "new" for i in ids}

    nodes = mail_nodes(tmp_path / "node", nats_cluster)
    (tmp_path / "node" / "node1").mkdir(parents=True)  # a node of the same cluster: the same key (docs/scale-out.md)
    shutil.copy2(home / "persmem.key", tmp_path / "node" / "node1" / "persmem.key")
    node = nodes.start()
    try:
        history = {m["id"]: m["status"] for m in call(node, "amq_history", "wren", limit=100)["messages"]}
        assert history == {i: "read" if i in ids[:2] else "unread" for i in ids[:6]}
        assert call(node, "amq_read", "wren", agent="", msg_id=ids[3])["body"] == "old mail 3"
        assert [m["id"] for m in call(node, "amq_check", "kite")["messages"]] == [ids[6]]
    finally:
        nodes.stop()



def test_more_replicas_than_nats_servers_fails_startup_after_asking_again_with_the_fix(tmp_path, nats_cluster):
    """JetStream refuses to place a stream on fewer servers than its replicas ("no suitable peers"): a cluster
    started together with persmem says so for a few seconds, so startup asks again for connect_timeout_seconds
    (the flake this fixes: a first node refused at once), then fails naming what to start or lower."""
    from persmem_core.sdk.testing import ClusterNodes

    nodes = ClusterNodes(tmp_path / "nodes", nats_cluster, AGENTS, env=NO_MEMORY,
                         config={"cluster": {"replicas": 5, "connect_timeout_seconds": 3}})
    began = time.monotonic()
    try:
        with pytest.raises(RuntimeError) as failed:
            nodes.start()
    finally:
        nodes.stop()
    assert time.monotonic() - began >= 3  # asked again until connect_timeout_seconds, not refused at once
    text = str(failed.value)
    assert "could not place the mail stream PERSMEM_AMQ within 3 s: fewer JetStream servers are online than its 5 " \
           "replica(s)" in text, text
    assert "Start the missing servers" in text and "lower [cluster] replicas" in text


def test_a_node_started_together_with_the_nats_servers_waits_for_jetstream_and_delivers(tmp_path):
    """Servers booted at the same time as persmem (no waiting for the cluster to form): persmem connects once
    they listen, asks again while JetStream elects its leaders and learns its servers, then works."""
    from persmem_core.sdk.testing import NatsCluster

    cluster = NatsCluster(tmp_path / "nats", size=3).start(wait=False)
    nodes = mail_nodes(tmp_path / "nodes", cluster)
    try:
        node = nodes.start()
        sent = call(node, "amq_send", "kite", to_agent="wren", body="early", subject="boot")
        assert sent["status"] == "delivered"
        assert call(node, "amq_read", "wren", agent="", msg_id=sent["id"])["body"] == "early"
    finally:
        nodes.stop()
        cluster.stop()
