#!/usr/bin/env python3
"""Keep-alive throughput of the Python MCP SDK 2.x client over Streamable HTTP: C clients call
`echo` one after another for S seconds (each client keeps its HTTP connections open).

    rate.py --url URL [--clients C] [--seconds S] [--mode auto|legacy] [--bearer TOKEN]

Prints one JSON line: {"calls": N, "seconds": S, "clients": C}. Used by
crates/sluice/benches/keepalive.rs.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

ECHO = {"text": "a small result"}


async def one_client(a: argparse.Namespace, counts: list[int]) -> None:
    headers = {"Authorization": f"Bearer {a.bearer}"} if a.bearer else None
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(a.url, http_client=http), mode=a.mode) as client:
            for _ in range(20):  # warm-up
                await client.call_tool("echo", ECHO)
            await start.wait()
            n = 0
            while time.monotonic() < end_at[0]:
                result = await client.call_tool("echo", ECHO)
                if result.is_error:
                    raise SystemExit(f"echo failed: {result}")
                n += 1
            counts.append(n)


start: anyio.Event
end_at = [0.0]


async def main(a: argparse.Namespace) -> dict:
    global start
    start = anyio.Event()
    counts: list[int] = []
    async with anyio.create_task_group() as tg:
        for _ in range(a.clients):
            tg.start_soon(one_client, a, counts)
        # Let every client connect and warm up, then start the clock for all.
        await anyio.sleep(2.0)
        end_at[0] = time.monotonic() + a.seconds
        start.set()
    return {"calls": sum(counts), "seconds": a.seconds, "clients": a.clients}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--mode", default="auto", choices=["auto", "legacy"])
    p.add_argument("--bearer")
    print(json.dumps(anyio.run(main, p.parse_args())))
