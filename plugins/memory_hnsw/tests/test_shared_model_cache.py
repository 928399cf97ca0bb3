"""Homes that name one PERSMEM_CACHE_DIR share the prepared (re-quantized) model: the first server makes it, the
next uses it as it is, and a cache folder others may write in is refused with the fix, never loaded from."""

from __future__ import annotations

import pytest

from persmem_core.sdk.testing import clean_env, start_server


def serve(home, cache):
    server = start_server(home, agents=("kite",), env=clean_env(home, PERSMEM_CACHE_DIR=str(cache),
                                                                 PERSMEM_DISABLE_PLUGINS="shell,git,searxng"))
    server.call_tool("memory_store", {"content": "The staging database moved to port 6432."}, agent="kite")
    found = server.call_tool("memory_search", {"query": "which port does the staging database use"}, agent="kite")
    return server, found


def test_two_homes_share_one_prepared_model(tmp_path):
    cache = tmp_path / "cache"
    first, found = serve(tmp_path / "one", cache)
    try:
        assert "6432" in found["results"][0]["content"]
        assert "prepared" in first.log() and "(dynamic int8)" in first.log()
    finally:
        first.stop()
    [model] = (cache / "models").glob("*/model.onnx")
    assert not (tmp_path / "one" / "memory" / ".models").exists()
    stamp = model.stat().st_mtime_ns
    second, found = serve(tmp_path / "two", cache)
    try:
        assert "6432" in found["results"][0]["content"]
        assert "(dynamic int8)" not in second.log(), "the second home made the model again"
    finally:
        second.stop()
    assert model.stat().st_mtime_ns == stamp
    assert (cache.stat().st_mode & 0o777) == 0o700 and (cache / "models").stat().st_mode & 0o777 == 0o700


def test_a_cache_others_may_write_in_is_refused_with_the_fix(tmp_path):
    cache = tmp_path / "open"
    cache.mkdir()
    cache.chmod(0o777)
    home = tmp_path / "home"
    with pytest.raises(RuntimeError) as refused:
        start_server(home, agents=("kite",), env=clean_env(home, PERSMEM_CACHE_DIR=str(cache),
                                                           PERSMEM_DISABLE_PLUGINS="shell,git,searxng"))
    assert "exited with 1" in str(refused.value)
    assert f"PERSMEM_CACHE_DIR: {cache} is not this user's own folder closed to others" in str(refused.value)
    assert "chmod 700" in str(refused.value) and not (cache / "models").exists()
