#!/usr/bin/env python3
"""Two principals through sluice's HTTP listener with `[auth]`, with the Python MCP SDK 2.x
client and a bearer header each: what alice stores, pages and starts, can bob reach it?

    isolation.py --url URL --mode auto|legacy --alice TOKEN --bob TOKEN
                 [--tool inventory --args '{"count": 3000}'] [--slow slow_task]

alice calls TOOL (a result sluice stores), reads its first page, and starts SLOW as an
operation (`_timeout_s`); then bob, in a session (or stateless requests) of his own, tries each
of alice's ids; then alice again, in a new connection, lists and reads her own. Prints one JSON
object:
  {"protocol_version", "handle", "cursor", "operation",
   "bob": {"read", "cursor", "result", "cancel", "info", "query", "search"}   (texts, is_error),
   "alice_again": {"info", "read"}}
Every bob entry is {"text", "is_error"}, plus "code" when it was a JSON-RPC error. Exit 2 if connecting fails (e.g. 401).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


def dump(x):  # noqa: ANN001, ANN201
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


def brief(result: dict) -> dict:
    return {"text": result["content"][0]["text"], "is_error": bool(result.get("isError"))}


def connect(a: argparse.Namespace, token: str, http: httpx2.AsyncClient) -> Client:
    return Client(streamable_http_client(a.url, http_client=http), mode=a.mode)


async def main(a: argparse.Namespace) -> dict:
    out: dict = {}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.alice}"}, timeout=60) as http:
        async with connect(a, a.alice, http) as alice:
            out["protocol_version"] = alice.protocol_version
            stored = dump(await alice.call_tool(a.tool, json.loads(a.args)))
            handle = stored["_meta"]["sluice/stored"]["handle"]
            page = dump(await alice.call_tool("sluice_read", {"handle": handle}))
            cursor = page["_meta"]["sluice/page"]["next_cursor"]
            started = dump(await alice.call_tool(a.slow, {"seconds": 30, "quiet": True, "_timeout_s": 0.2}))
            operation = started["_meta"]["sluice/operation"]["id"]
            out.update(handle=handle, cursor=cursor, operation=operation)
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.bob}"}, timeout=60) as http:
        async with connect(a, a.bob, http) as bob:
            tries = {
                "read": ("sluice_read", {"handle": handle}),
                "cursor": ("sluice_read", {"cursor": cursor}),
                "query": ("sluice_query", {"handle": handle, "filter": "length"}),
                "search": ("sluice_search", {"handle": handle, "pattern": "item"}),
                "result": ("sluice_result", {"operation": operation}),
                "cancel": ("sluice_cancel", {"operation": operation}),
                "info": ("sluice_info", {}),
            }
            out["bob"] = {}
            for k, (t, args) in tries.items():
                try:
                    out["bob"][k] = brief(dump(await bob.call_tool(t, args)))
                except MCPError as e:  # refused as a JSON-RPC error, not an error result
                    out["bob"][k] = {"text": str(e), "is_error": True, "code": e.code}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.alice}"}, timeout=60) as http:
        async with connect(a, a.alice, http) as alice:
            out["alice_again"] = {
                "info": brief(dump(await alice.call_tool("sluice_info", {}))),
                "read": brief(dump(await alice.call_tool("sluice_read", {"cursor": cursor}))),
                "cancel": brief(dump(await alice.call_tool("sluice_cancel", {"operation": operation}))),
            }
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    p.add_argument("--alice", required=True)
    p.add_argument("--bob", required=True)
    p.add_argument("--tool", default="inventory")
    p.add_argument("--args", default='{"count": 3000}')
    p.add_argument("--slow", default="slow_task")
    args = p.parse_args()
    try:
        result = anyio.run(main, args)
    except (OSError, httpx2.HTTPError) as e:
        print(f"cannot connect: {e}", file=sys.stderr)
        sys.exit(2)
    json.dump(result, sys.stdout, ensure_ascii=False)
