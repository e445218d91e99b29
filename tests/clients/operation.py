#!/usr/bin/env python3
"""Starts a slow call through sluice with the Python MCP SDK 2.x client, so that it becomes
an operation, then collects its result with sluice_result.

    operation.py --mode auto|legacy (--stdio 'CMD ARGS...' | --url URL) --marker FILE

Prints one JSON object: {"protocol_version", "started": <_meta["sluice/operation"]>,
"ended": <the same, from sluice_result>, "text": <sluice_result's first text>}.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import warnings

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


def dump(x):  # noqa: ANN001, ANN201
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(a: argparse.Namespace) -> dict:
    if a.stdio:
        argv = shlex.split(a.stdio)
        target = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    else:
        target = a.url
    async with Client(target, mode=a.mode, cache=None, read_timeout_seconds=60) as c:
        started = dump(await c.call_tool("sleep", {"seconds": 2, "marker": a.marker, "_timeout_s": 0.5}))
        op = started["_meta"]["sluice/operation"]
        ended = dump(await c.call_tool("sluice_result", {"operation": op["id"], "wait_s": 30}))
        return {
            "protocol_version": c.protocol_version,
            "started": op,
            "ended": ended["_meta"]["sluice/operation"],
            "text": ended["content"][0]["text"],
        }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    p.add_argument("--stdio")
    p.add_argument("--url")
    p.add_argument("--marker", required=True)
    json.dump(anyio.run(main, p.parse_args()), sys.stdout)
