"""Encryption at rest in the memory store (issue 19), through a real server and a real MCP client.

What a memory tool stores is found by search and appears in no file of the memory folder (byte search, the
index and retrieval counts included): also after a restart (the index loaded from its sealed snapshot) and after
a compaction. A plaintext store from before encryption keeps opening; the reseal hook (`persmem key migrate`)
seals it whole. A wrong key stops the server with a clear message and changes no file. A kill -9 during a burst
of stores loses no acknowledged one.
"""

import hashlib
import os
import random
import secrets
import threading
import time
from pathlib import Path

import anyio
import msgspec
import pytest

from persmem_core.sdk.testing import Host, RunningServer, clean_env, free_port, start_server, tool_result, write_config
from persmem_core.sdk import is_sealed
from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.store.log import intact_frames

AGENT = "kite"


def new_key() -> str:
    return secrets.token_hex(32)


def restart(server: RunningServer, env: dict | None = None) -> RunningServer:
    """The same home served again (the agents and their tokens are on file)."""
    return RunningServer(server.home, env or server.env, free_port(), server.tokens).start()


def store(server, content: str, **extra) -> dict:
    return server.call_tool("memory_store", {"content": content, "project": "enc", **extra}, agent=AGENT)


def search(server, query: str, **extra) -> list[str]:
    found = server.call_tool("memory_search", {"query": query, "project": "enc", **extra}, agent=AGENT)
    return [r["content"] for r in found["results"]]


def files_holding(folder: Path, phrases: list[str]) -> dict[str, list[str]]:
    """Every file under `folder` that holds any of `phrases` (as UTF-8 bytes), with the phrases it holds."""
    found = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits = [phrase for phrase in phrases if phrase.encode() in data]
        if hits:
            found[str(path.relative_to(folder))] = hits
    return found


def assert_fully_sealed(collection: Path) -> None:
    """Every log frame, the index file and the retrieval counts are sealed; the sidecar vouches for the index."""
    data = (collection / "records.log").read_bytes()
    frames = list(intact_frames(data))
    assert frames and frames[-1][1] == len(data)
    assert all(is_sealed(payload) for _, _, payload in frames), "a plaintext frame is left in the log"
    index = (collection / "vectors.hnsw").read_bytes()
    assert is_sealed(index)
    meta = msgspec.json.decode((collection / "vectors.hnsw.meta.json").read_bytes())
    assert meta["sha256"] == hashlib.sha256(index).hexdigest(), "the sidecar's checksum is over the file as stored"
    if (collection / "usage.msgpack").exists():
        assert is_sealed((collection / "usage.msgpack").read_bytes())


def hashes(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip}


def open_in_process(home: Path, env: dict):
    """The home's `memories` collection opened in this process with the home's Sealer (no server running)."""
    from persmem_memory_hnsw.service import make_embedder

    host = Host(environ=env)
    return Collection("memories", home / "memory" / "memories", make_embedder(host), host.section("memory"),
                      host.sealer).open()


def test_stored_and_updated_phrases_are_searchable_and_on_no_disk(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home, PERSMEM_KEY=new_key())
    server = start_server(home, agents=(AGENT,), env=env)
    phrases = ["periwinkle quokka ledger reconciles at dawn", "marzipan heron rotates the vault keys weekly",
               "tangerine axolotl cache warms before noon"]
    secrets_ = [*phrases, "the old wording of a fact"]  # an old version's text is memory text too
    try:
        first = store(server, phrases[0], tags="secret")
        second = store(server, "the old wording of a fact that will change")
        server.call_tool("memory_update", {"memory_id": second["id"], "content": phrases[1]}, agent=AGENT)
        server.call_tool("memory_bulk_store", {"chunks": [{"content": phrases[2]}], "project": "enc"}, agent=AGENT)
        assert search(server, "quokka ledger")[0] == phrases[0]
        assert search(server, "heron vault keys")[0] == phrases[1]
        assert search(server, "axolotl cache", mode="dense")[0] == phrases[2]
        assert server.call_tool("memory_get", {"memory_id": first["id"]}, agent=AGENT)["content"] == phrases[0]
        assert files_holding(home / "memory", secrets_) == {}
    finally:
        server.stop()  # saves the index and the retrieval counts
    collection = home / "memory" / "memories"
    assert_fully_sealed(collection)
    assert (collection / "usage.msgpack").exists()
    assert files_holding(home / "memory", secrets_) == {}

    server = restart(server)
    try:
        assert search(server, "quokka ledger")[0] == phrases[0]
        assert search(server, "axolotl cache", mode="dense")[0] == phrases[2]
        assert "index loaded" in server.log() and "rebuilt the vector index" not in server.log()
    finally:
        server.stop()

    col = open_in_process(home, env)  # a compaction, as the server runs it when most of the log is dead
    before = col.log.size
    col.compact()
    col.close()
    assert (collection / "records.log").stat().st_size < before  # the superseded version is gone
    assert_fully_sealed(collection)
    assert files_holding(home / "memory", secrets_) == {}
    server = restart(server)
    try:
        assert search(server, "heron vault keys")[0] == phrases[1]
        assert search(server, "quokka ledger")[0] == phrases[0]
    finally:
        server.stop()


def test_plaintext_store_opens_with_encryption_on_and_reseal_seals_it_whole(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home, PERSMEM_KEY=new_key())
    write_config(home, {"encryption": {"enabled": False}})
    server = start_server(home, agents=(AGENT,), env=env)
    old = "cobalt pangolin archive before encryption"
    try:
        store(server, old)
        assert search(server, "pangolin archive")[0] == old  # a retrieval count to save
    finally:
        server.stop()
    collection = home / "memory" / "memories"
    assert set(files_holding(home / "memory", [old])) == {"memories/records.log"}  # plaintext, as configured
    assert not is_sealed((collection / "usage.msgpack").read_bytes())

    write_config(home, {"encryption": {"enabled": True}})
    server = restart(server)
    new = "vermilion narwhal journal after encryption"
    try:
        store(server, new)
        assert search(server, "pangolin archive")[0] == old  # the plaintext frame still reads
        assert search(server, "narwhal journal")[0] == new
    finally:
        server.stop()
    payloads = [payload for _, _, payload in intact_frames((collection / "records.log").read_bytes())]
    # Mixed: the old memory's frame plain, the new one's sealed (memory_store embeds before it answers: one frame
    # each, logged with its vectors).
    assert [is_sealed(p) for p in payloads] == [False, True]
    assert files_holding(home / "memory", [new]) == {}

    host = Host(environ=env)
    from persmem_memory_hnsw.plugin import reseal

    assert any(impl.plugin_name == "memory_hnsw" for impl in host.pm.hook.reseal.get_hookimpls())
    # What a reseal killed mid-way leaves: the temp file of the index it was writing (the next run writes one of
    # the same name, so it must go first).
    (collection / "vectors.hnsw.tmp").write_bytes((collection / "vectors.hnsw").read_bytes())
    seen = []
    before = hashes(home / "memory")
    counted = reseal(host=host, sealer=host.sealer, progress=lambda *a: seen.append(a), dry_run=True)
    assert hashes(home / "memory") == before, "a dry run writes nothing"
    # The log, the index, the retrieval counts, the checkpoint and the leftover temp file.
    assert counted.what == "memory" and counted.checked == 5 and counted.plain >= 1 and counted.rewritten >= 1
    done = reseal(host=host, sealer=host.sealer, progress=lambda *a: seen.append(a), dry_run=False)
    assert (done.checked, done.rewritten, done.plain) == (counted.checked, counted.rewritten, counted.plain)
    assert seen[-1] == ("memory", 5, 5) and not (collection / "vectors.hnsw.tmp").exists()
    assert_fully_sealed(collection)
    assert files_holding(home / "memory", [old, new]) == {}
    again = reseal(host=host, sealer=host.sealer, progress=lambda *a: None, dry_run=False)
    assert (again.rewritten, again.plain) == (0, 0)

    server = restart(server)
    try:
        assert search(server, "pangolin archive")[0] == old
        assert search(server, "narwhal journal")[0] == new
        assert "index loaded" in server.log()
        with pytest.raises(Exception, match="in use by another persmem process"):  # the store's owner lock
            reseal(host=host, sealer=host.sealer, progress=lambda *a: None, dry_run=False)
    finally:
        server.stop()


def test_wrong_key_stops_the_server_and_changes_no_file(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home, PERSMEM_KEY=new_key())
    server = start_server(home, agents=(AGENT,), env=env)
    try:
        store(server, "saffron ibex rotates the backups")
        search(server, "ibex backups")
    finally:
        server.stop()
    skip = ("server.log",)
    before, memory_before = hashes(home, skip=skip), hashes(home / "memory")
    wrong = clean_env(home, PERSMEM_KEY=new_key())
    with pytest.raises(RuntimeError, match="exited") as refused:
        restart(server, env=wrong)
    assert "is not the key the data" in str(refused.value), str(refused.value)[-2000:]
    assert hashes(home, skip=skip) == before
    assert hashes(home / "memory") == memory_before  # the memory store's own lock file included

    # Without the home's record of its keys (encryption.json), the memory store's own check refuses: it reads the
    # key ids its files name before it takes the store, and nothing in the memory folder changes.
    (home / "encryption.json").unlink()
    with pytest.raises(RuntimeError, match="exited") as refused:
        restart(server, env=wrong)
    assert "records.log" in str(refused.value) and "not on hand" in str(refused.value), str(refused.value)[-2000:]
    assert hashes(home / "memory") == memory_before

    # The refused key was not recorded: the right key still opens everything (and is recorded again).
    assert not (home / "encryption.json").exists()
    server = restart(server)  # the right key: everything is there
    try:
        assert search(server, "ibex backups")[0] == "saffron ibex rotates the backups"
    finally:
        server.stop()


def contents(server, ids: list[str]) -> dict[str, str]:
    """memory_get of each id in one MCP session: id -> content (ToolCallError for one that is missing)."""
    async def get_all() -> dict[str, str]:
        async with server.client(AGENT) as client:
            return {memory_id: tool_result(await client.call_tool("memory_get", {"memory_id": memory_id}))["content"]
                    for memory_id in ids}

    return anyio.run(get_all)


def test_kill_9_during_encrypted_stores_loses_no_acknowledged_one(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home, PERSMEM_KEY=new_key())
    server = start_server(home, agents=(AGENT,), env=env)
    rng = random.Random(19)
    acknowledged: dict[str, str] = {}
    try:
        for round_ in range(3):
            stop = threading.Event()

            async def writer(worker: int) -> None:
                async with server.client(AGENT) as client:
                    i = 0
                    while not stop.is_set():
                        content = f"burst {round_}-{worker}-{i} gecko lantern {secrets.token_hex(4)}"
                        result = await client.call_tool("memory_store", {"content": content, "project": "burst",
                                                                         "dedup": False})
                        stored = tool_result(result)
                        acknowledged[stored["id"]] = content
                        i += 1

            async def burst() -> None:
                async with anyio.create_task_group() as group:
                    for worker in range(3):
                        group.start_soon(writer, worker)

            def run() -> None:
                try:
                    anyio.run(burst)
                except Exception:  # the kill cuts the calls in flight (a timeout is not caught)
                    pass

            # The kill must come while stores are being acknowledged, not while the server is still loading its
            # store and model (a memory tool waits for that, several seconds on a busy box): one store first.
            warm = f"warm {round_} gecko lantern {secrets.token_hex(4)}"
            acknowledged[server.call_tool("memory_store", {"content": warm, "project": "burst", "dedup": False},
                                          agent=AGENT)["id"]] = warm
            thread = threading.Thread(target=run)
            thread.start()
            time.sleep(rng.uniform(1.0, 3.0))
            server.kill()
            stop.set()
            thread.join(timeout=60)
            assert not thread.is_alive()
            server = restart(server)
            for memory_id, content in contents(server, list(acknowledged)).items():
                assert content == acknowledged[memory_id], f"acknowledged {memory_id} lost after kill {round_ + 1}"
        assert len(acknowledged) >= 30, len(acknowledged)
        some = rng.choice(sorted(acknowledged.values()))
        assert some in [r["content"] for r in server.call_tool(
            "memory_search", {"query": some, "project": "burst", "top_k": 5, "mode": "lexical"}, agent=AGENT)["results"]]
    finally:
        server.stop()
    assert files_holding(home / "memory", ["gecko lantern"]) == {}


@pytest.fixture(scope="module")
def embedder():
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

    return OnnxEmbedder(default_model_files()).load()


def sealed_collection(folder: Path, embedder, sealer, n: int = 6) -> None:
    """A collection of `n` memories (one frame each) written with `sealer`."""
    col = Collection("memories", folder, embedder, MemoryConfig(), sealer).open()
    for i in range(n):  # one append each: one frame each
        col.store([NewMemory(content=f"sealed fact {i} about the ochre tapir", project="p", type="note", tags=[])],
                  author="kite", dedup=False)
    col.close()


def test_a_sealed_frame_that_does_not_open_is_never_cut_and_nothing_is_written(tmp_path, embedder):
    """A CRC-valid frame that fails to open (changed on disk with its CRC fixed, or no key) stops the open with a
    SealingError naming the log; the log is not cut, no torn tail is kept aside, the index is not saved."""
    import zlib

    from persmem_core.sdk.testing import key_id
    from persmem_core.sdk import Sealer, SealingError
    from persmem_memory_hnsw.store.log import HEADER

    key = os.urandom(32)
    sealer = Sealer({key_id(key): key}, key_id(key), True)
    folder = tmp_path / "memories"
    sealed_collection(folder, embedder, sealer)
    before = hashes(folder)

    # The checkpoint is read first (checkpoint.py): it is the file named when it is sealed under a missing key.
    with pytest.raises(SealingError, match=r"checkpoint\.bin: this data was sealed under key .* not on hand"):
        Collection("memories", folder, embedder, MemoryConfig()).open()  # no key at all
    other = os.urandom(32)
    with pytest.raises(SealingError, match=r"checkpoint\.bin: .*not on hand \(keys loaded: " + key_id(other)):
        Collection("memories", folder, embedder, MemoryConfig(), Sealer({key_id(other): other}, key_id(other),
                                                                         True)).open()
    assert hashes(folder) == before
    (folder / "checkpoint.bin").unlink()  # then the log itself says so
    with pytest.raises(SealingError, match=r"records\.log: this data was sealed under key .* not on hand"):
        Collection("memories", folder, embedder, MemoryConfig()).open()
    before = hashes(folder)

    data = bytearray((folder / "records.log").read_bytes())
    third = list(intact_frames(bytes(data)))[2]
    data[third[0] + HEADER.size + 50] ^= 0x01  # inside the ciphertext of the third frame, CRC made right again
    payload = bytes(data[third[0] + HEADER.size : third[1]])
    HEADER.pack_into(data, third[0], len(payload), zlib.crc32(payload))
    (folder / "records.log").write_bytes(bytes(data))
    before = hashes(folder)
    with pytest.raises(SealingError, match=r"records\.log: sealed data does not authenticate"):
        Collection("memories", folder, embedder, MemoryConfig(), sealer).open()
    assert hashes(folder) == before and not list(folder.glob("*.torn-*"))


def test_backup_copies_sealed_frames_without_a_key(tmp_path, embedder):
    """backup_memory needs no key: it copies the sealed frames up to the last intact one (a torn tail left out),
    and the copy opens with the key."""
    from persmem_core.sdk.testing import key_id
    from persmem_core.sdk import Sealer
    from persmem_memory_hnsw.backup import backup_memory

    key = os.urandom(32)
    sealer = Sealer({key_id(key): key}, key_id(key), True)
    store_folder = tmp_path / "memory"
    sealed_collection(store_folder / "memories", embedder, sealer)
    log_bytes = (store_folder / "memories" / "records.log").read_bytes()
    with open(store_folder / "memories" / "records.log", "ab") as f:
        f.write(log_bytes[:30])  # a torn frame, as a kill mid-append leaves
    dest = tmp_path / "backup"
    dest.mkdir()
    backup_memory(store_folder, dest)
    assert (dest / "memories" / "records.log").read_bytes() == log_bytes
    assert files_holding(dest, ["ochre tapir"]) == {}
    col = Collection("memories", dest / "memories", embedder, MemoryConfig(), sealer).open()
    assert len(col.memories) == 6
    col.close()
