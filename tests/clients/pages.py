#!/usr/bin/env python3
"""Calls one tool through sluice with the Python MCP SDK 2.x client and, if sluice stored the
result, reads every page back by following next_cursor.

    pages.py --mode auto|legacy (--stdio 'CMD ARGS...' | --url URL) --tool NAME [--args JSON]
             [--path POINTER] [--query FILTER]... [--search PATTERN]... [--wait-operation]
             [--repeat N] [--read-url URL]

Prints one JSON object on stdout:
  {"protocol_version", "stored": <_meta["sluice/stored"]> | null, "answer": <first text>,
   "pages": N, "forms": [...], "items": [...] (items pages, slices of items joined and parsed)
   | "text": "..." (text pages joined), "max_page_chars": N}
or, when the result was not stored, {"protocol_version", "stored": null, "result": <result>}.
With --query or --search, the stored result is queried (sluice_query) or searched
(sluice_search) instead of paged: "answers": [{"text", "meta", "is_error"}] in order.
With --wait-operation, a call that became an operation is collected with sluice_result:
{"protocol_version", "started": <its _meta["sluice/operation"]>, "ended": <the same, at the
end>, "text": <the result's first text>}.
With --repeat N, the call is made N times in all: {"protocol_version", "calls": [{"text",
"cache": <_meta["sluice/cache"]> | null, "is_error"}] in order}.
With --read-url, the stored result is read back (paged, queried, searched) by a second client
connected to that URL (another sluice sharing the store).
Exit 2 if connecting fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import warnings

import anyio
import mcp.types as types
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
    async with client_of(target, a) as c:
        out: dict = {"protocol_version": c.protocol_version}
        if a.repeat:
            calls = []
            for _ in range(a.repeat):
                r = dump(await c.call_tool(a.tool, json.loads(a.args)))
                calls.append(
                    {
                        "text": r["content"][0]["text"] if r.get("content") else None,
                        "cache": (r.get("_meta") or {}).get("sluice/cache"),
                        "is_error": bool(r.get("isError")),
                    }
                )
            out["calls"] = calls
            return out
        result = dump(await c.call_tool(a.tool, json.loads(a.args)))
        operation = (result.get("_meta") or {}).get("sluice/operation")
        if a.wait_operation and operation:
            ended = dump(await c.call_tool("sluice_result", {"operation": operation["id"], "wait_s": 30}))
            out.update(
                started=operation,
                ended=ended["_meta"]["sluice/operation"],
                text=ended["content"][0]["text"],
            )
            return out
        stored = (result.get("_meta") or {}).get("sluice/stored")
        out["stored"] = stored
        if stored is None:
            out["result"] = result
            return out
        out["answer"] = result["content"][0]["text"]
        if a.read_url:
            async with client_of(a.read_url, a) as reader:
                return await read_back(reader, a, stored, out)
        return await read_back(c, a, stored, out)


def client_of(target, a: argparse.Namespace) -> Client:  # noqa: ANN001
    return Client(
        target,
        mode=a.mode,
        cache=None,
        read_timeout_seconds=120,
        client_info=types.Implementation(name=a.client_name, version="1.0.0"),
    )


async def read_back(c, a: argparse.Namespace, stored: dict, out: dict) -> dict:  # noqa: ANN001
    """Queries, searches or pages the stored result through client `c`."""
    if a.query or a.search:
        asked = [("sluice_query", {"filter": f}) for f in a.query]
        asked += [("sluice_search", {"pattern": p}) for p in a.search]
        answers = []
        for tool, arguments in asked:
            answer = dump(await c.call_tool(tool, {"handle": stored["handle"], **arguments}))
            answers.append(
                {
                    "text": answer["content"][0]["text"],
                    "meta": answer.get("_meta") or {},
                    "is_error": bool(answer.get("isError")),
                }
            )
        out["answers"] = answers
        return out
    request: dict = {"handle": stored["handle"]}
    if a.path is not None:
        request["path"] = a.path
    items: list = []
    text = ""
    slice_ = ""
    forms: list[str] = []
    max_chars = 0
    while True:
        page = dump(await c.call_tool("sluice_read", request))
        if page.get("isError"):
            raise SystemExit(f"sluice_read failed: {page['content'][0]['text']}")
        meta = page["_meta"]["sluice/page"]
        data = page["content"][0]["text"]
        max_chars = max(max_chars, len(json.dumps(page, ensure_ascii=False)))
        forms.append(meta["form"])
        target = a.path if a.path is not None else stored.get("path")
        if meta["form"] == "items":
            items.extend(json.loads(data))
        elif target is not None and meta.get("path") not in (None, target):
            # A slice of one item too large for a page.
            forms[-1] = "items"
            slice_ += data
            if meta["end"] == meta["total"]:
                items.append(json.loads(slice_))
                slice_ = ""
        else:
            text += data
        if not meta["next_cursor"]:
            break
        request = {"cursor": meta["next_cursor"]}
    out.update(pages=len(forms), max_page_chars=max_chars)
    if "items" in forms:
        out["items"] = items
    else:
        out["text"] = text
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    p.add_argument("--stdio")
    p.add_argument("--url")
    p.add_argument("--tool", required=True)
    p.add_argument("--args", default="{}")
    p.add_argument("--path")
    p.add_argument("--client-name", default="sluice-pages-py")
    p.add_argument("--query", action="append", default=[])
    p.add_argument("--search", action="append", default=[])
    p.add_argument("--wait-operation", action="store_true")
    p.add_argument("--repeat", type=int, default=0)
    p.add_argument("--read-url")
    args = p.parse_args()
    try:
        result = anyio.run(main, args)
    except OSError as e:
        print(f"cannot connect: {e}", file=sys.stderr)
        sys.exit(2)
    json.dump(result, sys.stdout, ensure_ascii=False)
