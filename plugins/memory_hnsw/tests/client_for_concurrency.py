"""Helper process: one MCP client storing and searching against a running server; prints stored ids."""

import json
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, token: str, worker: int, count: int) -> None:
    ids, errors = [], []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            for i in range(count):
                result = await client.call_tool("memory_store", {
                    "content": f"worker {worker} wrote fact {i}: parcel {worker * 1000 + i} is in bay {i % 7}",
                    "project": "conc", "dedup": False})
                if result.is_error:
                    errors.append(result.content[0].text)
                else:
                    ids.append(json.loads(result.content[0].text)["id"])
                found = await client.call_tool("memory_search", {"query": f"parcel in bay {i % 7}", "project": "conc"})
                if found.is_error:
                    errors.append(found.content[0].text)
    print(json.dumps({"ids": ids, "errors": errors}))


anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
