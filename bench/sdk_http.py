"""What the SDK's HTTP client costs its caller per request, beside the clients it
replaced, in one run: the client's CPU (``time.process_time``) per POST of a
400-byte GraphQL body to a bare uvicorn app (``bench.floors:bare``, on the other
core), each client on one keep-alive connection:

- ``runstate.client.http`` (the SDK's own: asyncio and httptools);
- httpx's ``AsyncClient``;
- gql's session on its httpx transport, as the SDK sent every query and mutation
  before (the document printed again for each request).

Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import httpx
from gql import Client, GraphQLRequest, gql
from gql.transport.httpx import HTTPXAsyncTransport

from bench.fanout import free_port, wait_answering
from runstate.client.http import Connections

REQUESTS = int(os.environ.get("BENCH_SDK_HTTP_REQUESTS", "3000"))
WARM = 200
VARIABLES = {"input": {"expectedVersion": 1, "note": "y" * 300}}
BODY = json.dumps({"query": "mutation { step }", "variables": VARIABLES}).encode()
HEADERS = {"Authorization": "Bearer bench"}


async def per_request(post: Callable[[], Awaitable[object]]) -> float:
    """Microseconds of this process's CPU per ``post()``, after a warm-up."""
    for _ in range(WARM):
        await post()
    began = time.process_time()
    for _ in range(REQUESTS):
        await post()
    return 1e6 * (time.process_time() - began) / REQUESTS


async def measure(url: str) -> dict[str, float]:
    found: dict[str, float] = {}
    pool = Connections()
    endpoint = pool.endpoint(f"{url}/graphql", HEADERS)

    async def ours() -> object:
        return json.loads((await endpoint.post(BODY, 30)).body)

    found["runstate.client.http"] = await per_request(ours)
    await pool.aclose()
    async with httpx.AsyncClient(headers=HEADERS) as client:

        async def plain() -> object:
            return (await client.post(f"{url}/graphql", content=BODY)).json()

        found["httpx AsyncClient"] = await per_request(plain)
    transport = HTTPXAsyncTransport(url=f"{url}/graphql", headers=HEADERS)
    async with Client(transport=transport) as session:
        request = GraphQLRequest(gql("mutation { step }").document, variable_values=VARIABLES)

        async def through_gql() -> object:
            return await session.execute(request)

        found["gql on httpx (the SDK before)"] = await per_request(through_gql)
    return found


def main() -> None:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "bench.floors:bare", "--port", str(port)]
    server = subprocess.Popen([*command, "--log-level", "warning", "--no-access-log"])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_answering(url)
        found = asyncio.run(measure(url))
    finally:
        server.terminate()
        server.wait()
    ours = found["runstate.client.http"]
    print(f"The SDK's HTTP client: client CPU per request, {REQUESTS} POSTs each")
    for name, micros in found.items():
        print(f"  {name:32s} {micros:6.0f} us  {micros / ours:5.1f}x")


if __name__ == "__main__":
    main()
