#!/usr/bin/env python3
"""Scripted MCP session -> normalized JSON transcript, using the Python MCP SDK 2.x client.

Used by sluice's transparency tests: run once directly against a server and once through
sluice, then compare the two transcripts (they must be identical).

    transcript.py --mode auto|legacy (--stdio 'CMD ARGS...' | --url URL)
                  [--script everything|fixture|generic] [--declare sampling,elicitation,roots]
                  [--settle SECONDS] [--timeout SECONDS] [--raw-strings] [--drop-meta KEY]...

Prints exactly one JSON object on stdout (keys sorted, 1-space indent, UTF-8) and exits 0,
unless connecting failed (exit 2), the whole session timed out (exit 3) or the
session broke outside any single request (exit 4); diagnostics go to
stderr. The transcript schema is shared with transcript.mjs (see tests/clients/README.md).

Normalization (only what legitimately differs between two runs): wall-clock times
("3:04:05 PM", ISO-8601 timestamps) -> "<TIME>"/"<TIMESTAMP>", UUIDs -> "<UUID>", also inside
base64 `blob`s that decode to UTF-8 text; integral floats -> ints; strings longer than 8192
characters are replaced by "<sha256:HEX len:N head:FIRST-64-CHARS>" (content-preserving for
comparison; --raw-strings keeps them); `_meta` keys named by --drop-meta are removed.
Lists whose order is not defined by the protocol (tools, resources, templates, prompts) are
sorted, and so are logs and server_requests (they can arrive on independent streams).
Request ids and progress tokens never appear in the transcript.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import re
import shlex
import sys
import warnings
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

LONG_STRING = 8192
BIG_ECHO_LEN = 200 * 1024

# ----------------------------------------------------------------------------- normalization

_TIME_RE = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[ \u202f\u00a0]?[AaPp]\.?[Mm]\.?)?")
_ISO_RE = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_UUID_RE = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")


def norm_text(s: str) -> str:
    s = _ISO_RE.sub("<TIMESTAMP>", s)
    s = _TIME_RE.sub("<TIME>", s)
    return _UUID_RE.sub("<UUID>", s)


class Normalizer:
    def __init__(self, raw_strings: bool, drop_meta: list[str]):
        self.raw_strings = raw_strings
        self.drop_meta = set(drop_meta)

    def string(self, s: str) -> str:
        s = norm_text(s)
        if not self.raw_strings and len(s) > LONG_STRING:
            digest = hashlib.sha256(s.encode("utf-8")).hexdigest()
            s = f"<sha256:{digest} len:{len(s)} head:{s[:64]}>"
        return s

    def blob(self, b: str) -> str:
        try:
            text = base64.b64decode(b, validate=True).decode("utf-8")
        except Exception:
            return self.string(b)
        normed = norm_text(text)
        if normed != text:
            b = base64.b64encode(normed.encode("utf-8")).decode("ascii")
        return self.string(b)

    def __call__(self, v: Any) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k == "_meta" and isinstance(x, dict) and self.drop_meta:
                    x = {mk: mv for mk, mv in x.items() if mk not in self.drop_meta}
                    if not x:
                        continue
                out[k] = self.blob(x) if k == "blob" and isinstance(x, str) else self(x)
            return out
        if isinstance(v, (list, tuple)):
            return [self(x) for x in v]
        if isinstance(v, str):
            return self.string(v)
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            return int(v)
        return v


def dump(model: Any) -> Any:
    """Wire-shaped JSON of an SDK result: aliases, and only the fields that were actually set."""
    if model is None:
        return None
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return model


def rebuild(pages: list[tuple[dict[str, Any], str]]) -> Any:
    """The JSON document that sluice's pages walk (whole items or members, slices of
    scalars too large for a page, and the members shown around a paged value), put
    back together in order."""
    placed: list[tuple[list[str], Any]] = []
    objects: set[str] = set()
    slices: dict[str, str] = {}
    keep = object()  # keeps the place of a member paged later

    def tokens(pointer: str) -> list[str]:
        return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]

    for meta, data in pages:
        for around in meta.get("around") or []:
            objects.add(around["path"])
            base = tokens(around["path"])
            members = list(around["members"].items())
            members.insert(around["index"], (around["key"], keep))
            placed += [(base + [k], v) for k, v in members]
        path, form = meta["path"], meta["form"]
        if form == "items":
            placed += [(tokens(path) + [str(meta["start"] + i)], v) for i, v in enumerate(json.loads(data))]
        elif form == "members":
            objects.add(path)
            placed += [(tokens(path) + [k], v) for k, v in json.loads(data).items()]
        else:
            slices[path] = slices.get(path, "") + data
            if meta["end"] == meta["total"]:
                placed.append((tokens(path), json.loads(slices.pop(path))))
    root: list[Any] = [None]
    for at, value in placed:
        parent: Any = root
        key: Any = 0
        for depth, token in enumerate(at):
            here = parent[key] if isinstance(parent, list) else parent.get(key)
            if here is None or here is keep:
                here = {} if "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in at[:depth]) in objects else []
                parent[key] = here
            parent, key = here, (token if isinstance(here, dict) else int(token))
            if isinstance(parent, list) and key == len(parent):
                parent.append(None)
        current = parent[key] if isinstance(parent, list) else parent.get(key)
        if value is not keep or current is None:
            parent[key] = value
    return root[0]


def error_of(e: BaseException) -> dict[str, Any]:
    if isinstance(e, MCPError):
        err: dict[str, Any] = {"code": e.code, "message": e.error.message}
        if e.error.data is not None:
            err["data"] = e.error.data
        return err
    return {"exception": type(e).__name__, "message": str(e)}


def big_message(n: int) -> str:
    """Deterministic ASCII text of exactly n characters (numbered 64-byte lines)."""
    body = "the quick brown fox jumps over the lazy dog 0123456789"  # 54 chars
    out = []
    i = 0
    size = 0
    while size < n:
        line = f"{i:08d} {body}\n"
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out)[:n]


def fill_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """Deterministic elicitation answer for a requested schema (defaults first, then by type)."""
    content: dict[str, Any] = {}
    for name, prop in sorted(((schema or {}).get("properties") or {}).items()):
        if "default" in prop:
            content[name] = prop["default"]
        elif prop.get("enum"):
            content[name] = prop["enum"][0]
        elif prop.get("oneOf"):
            content[name] = prop["oneOf"][0].get("const")
        elif prop.get("type") == "boolean":
            content[name] = True
        elif prop.get("type") in ("integer", "number"):
            content[name] = prop.get("minimum", 1)
        elif prop.get("type") == "array":
            items = prop.get("items") or {}
            first = (items.get("enum") or [None])[0] or ((items.get("anyOf") or [{}])[0].get("const"))
            content[name] = [first] if first is not None else []
        elif prop.get("format") == "email":
            content[name] = "sluice@example.com"
        elif prop.get("format") == "uri":
            content[name] = "https://example.com/sluice"
        elif prop.get("format") == "date":
            content[name] = "2000-01-01"
        else:
            content[name] = "sluice"
    return content


def sampling_reply_text(messages: list[dict[str, Any]]) -> str:
    texts = []
    for m in messages:
        content = m.get("content")
        for c in content if isinstance(content, list) else [content]:
            if isinstance(c, dict) and c.get("type") == "text":
                texts.append(c.get("text", ""))
    return "sluice test reply to: " + " | ".join(texts)


FIXED_ROOTS = [{"uri": "file:///tmp", "name": "tmp"}]
SAMPLING_MODEL = "sluice-test-model"

# ----------------------------------------------------------------------------- the session


class Recorder:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.declare = {d.strip() for d in (args.declare or "").split(",") if d.strip()}
        self.t: dict[str, Any] = {
            "driver": "python-mcp-2",
            "mode": args.mode,
            "script": args.script,
            "declared": sorted(self.declare),
            "calls": [],
            "progress": {},
            "resources": [],
            "resource_reads": [],
            "templates": [],
            "prompts": [],
            "prompt_gets": [],
            "completions": [],
            "logs": [],
        }
        if self.declare:
            self.t["server_requests"] = []
        self.tools_changed = 0

    # -- callbacks --------------------------------------------------------------------------
    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.t["logs"].append(dump(params))

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed += 1

    async def on_sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        p = dump(params)
        self.t["server_requests"].append({"method": "sampling/createMessage", "params": p})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=sampling_reply_text(p.get("messages", []))),
            model=SAMPLING_MODEL,
            stop_reason="endTurn",
        )

    async def on_elicit(self, ctx: Any, params: types.ElicitRequestParams) -> Any:
        p = dump(params)
        self.t["server_requests"].append({"method": "elicitation/create", "params": p})
        if p.get("mode") == "url":
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content=fill_schema(p.get("requestedSchema")))

    async def on_roots(self, ctx: Any) -> Any:
        self.t["server_requests"].append({"method": "roots/list", "params": None})
        return types.ListRootsResult(roots=[types.Root(uri=r["uri"], name=r["name"]) for r in FIXED_ROOTS])

    # -- helpers ----------------------------------------------------------------------------
    async def call(self, c: Client, tool: str, args: dict[str, Any]) -> Any:
        prog = self.t["progress"].setdefault(tool, [])

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            prog.append([progress, total, message])

        entry: dict[str, Any] = {"tool": tool, "args": args}
        result = None
        try:
            result = await c.call_tool(tool, args, progress_callback=on_progress)
            entry["result"] = await self.unstore(c, dump(result))
        except Exception as e:  # noqa: BLE001
            entry["error"] = error_of(e)
        self.t["calls"].append(entry)
        return result

    async def unstore(self, c: Client, result: dict[str, Any]) -> dict[str, Any]:
        """A result sluice stored (too large for the budget), read back whole with sluice_read:
        the text of a stored text result, as the one text block the upstream sent."""
        stored = (result.get("_meta") or {}).pop("sluice/stored", None)
        if stored is None:
            return result
        if not result["_meta"]:
            del result["_meta"]
        request: dict[str, Any] = {"handle": stored["handle"]}
        pages = []
        while True:
            page = dump(await c.call_tool("sluice_read", request))
            pages.append((page["_meta"]["sluice/page"], page["content"][0]["text"]))
            cursor = page["_meta"]["sluice/page"]["next_cursor"]
            if not cursor:
                break
            request = {"cursor": cursor}
        if stored["kind"] == "text":
            text = "".join(data for _, data in pages)
        else:
            text = json.dumps(rebuild(pages), separators=(",", ":"), ensure_ascii=False)
        result["content"] = [{"type": "text", "text": text}]
        return result

    async def step(self, key: str, entry: dict[str, Any], fn: Any) -> None:
        try:
            entry["result"] = dump(await fn())
        except Exception as e:  # noqa: BLE001
            entry["error"] = error_of(e)
        self.t[key].append(entry)

    async def set_level(self, c: Client, level: str) -> None:
        entry: dict[str, Any] = {"level": level}
        try:
            entry["result"] = dump(await c.set_logging_level(level))
        except Exception as e:  # noqa: BLE001
            entry["error"] = error_of(e)
        self.t["set_level"] = entry

    async def list_all(self, c: Client) -> list[types.Tool]:
        async def paged(fetch: Any, attr: str) -> list[Any]:
            items: list[Any] = []
            cursor = None
            while True:
                page = await fetch(cursor=cursor)
                items.extend(getattr(page, attr))
                cursor = page.next_cursor
                if not cursor:
                    return items

        tools = await paged(c.list_tools, "tools")
        self.t["tools"] = sorted((dump(x) for x in tools), key=lambda x: x["name"])
        caps = c.server_capabilities
        for key, fetch, attr, sort_key in (
            ("resources", c.list_resources, "resources", "uri"),
            ("templates", c.list_resource_templates, "resource_templates", "uriTemplate"),
            ("prompts", c.list_prompts, "prompts", "name"),
        ):
            cap = caps.prompts if key == "prompts" else caps.resources
            if cap is None:
                continue
            try:
                got = await paged(fetch, attr)
                self.t[key] = sorted((dump(x) for x in got), key=lambda x: x[sort_key])
            except Exception as e:  # noqa: BLE001
                self.t[key] = {"error": error_of(e)}
        return tools

    # -- scripts ----------------------------------------------------------------------------
    async def run(self, c: Client) -> None:
        info = c.server_info
        self.t["protocol_version"] = c.protocol_version
        if info is not None:
            self.t["server_name"] = info.name
            self.t["server_version"] = info.version
        self.t["server_capabilities"] = dump(c.server_capabilities)
        self.t["instructions"] = c.instructions

        # Servers may register tools only after the handshake (server-everything adds
        # capability-dependent tools then, announcing them with notifications/tools/list_changed).
        await anyio.sleep(self.args.settle)
        seen = self.tools_changed
        tools = await self.list_all(c)
        names = {x.name for x in tools}

        if self.args.script == "everything":
            await self.script_everything(c, names)
        elif self.args.script == "fixture":
            await self.script_fixture(c)

        await anyio.sleep(self.args.settle)
        if self.tools_changed != seen:  # the tool list changed after we listed it: take the final one
            await self.list_all(c)

    async def script_everything(self, c: Client, names: set[str]) -> None:
        await self.set_level(c, "debug")
        await self.call(c, "echo", {"message": "hello sluice"})
        await self.call(c, "echo", {"message": big_message(BIG_ECHO_LEN)})
        add = "get-sum" if "get-sum" in names else ("add" if "add" in names else "get-sum")
        await self.call(c, add, {"a": 2, "b": 40})
        await self.call(c, "get-structured-content", {"location": "Chicago"})
        await self.call(c, "get-resource-links", {"count": 3})
        await self.call(c, "get-tiny-image", {})
        await self.call(c, "get-annotated-message", {"messageType": "success", "includeImage": True})
        await self.call(c, "get-resource-reference", {"resourceType": "Text", "resourceId": 2})
        await self.call(c, "trigger-long-running-operation", {"duration": 2, "steps": 4})
        await self.call(c, "echo", {})  # invalid arguments
        await self.call(c, "no-such-tool", {})
        if "trigger-sampling-request" in names:
            await self.call(c, "trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20})
        if "trigger-elicitation-request" in names:
            await self.call(c, "trigger-elicitation-request", {})
        if "get-roots-list" in names:
            await self.call(c, "get-roots-list", {})

        resources = self.t["resources"] if isinstance(self.t["resources"], list) else []
        uris = [r["uri"] for r in resources][:2] + [
            "demo://resource/dynamic/text/1",
            "demo://resource/dynamic/blob/2",
            "demo://resource/does-not-exist",
        ]
        for uri in uris:
            await self.step("resource_reads", {"uri": uri}, lambda uri=uri: c.read_resource(uri))

        for name, pargs in (
            ("simple-prompt", None),
            ("args-prompt", {"city": "Paris", "state": "Texas"}),
            ("completable-prompt", {"department": "Engineering", "name": "Alice"}),
            ("resource-prompt", {"resourceType": "Text", "resourceId": "1"}),
            ("no-such-prompt", None),
        ):
            await self.step(
                "prompt_gets", {"name": name, "args": pargs}, lambda n=name, a=pargs: c.get_prompt(n, a)
            )

        for ref, arg, ctx in (
            ({"type": "ref/prompt", "name": "completable-prompt"}, {"name": "department", "value": "E"}, None),
            ({"type": "ref/prompt", "name": "completable-prompt"}, {"name": "name", "value": "A"},
             {"department": "Engineering"}),
            ({"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"},
             {"name": "resourceId", "value": "7"}, None),
        ):
            await self.complete(c, ref, arg, ctx)

    async def complete(self, c: Client, ref: dict[str, Any], arg: dict[str, str], ctx: dict[str, str] | None) -> None:
        model = (
            types.PromptReference(type="ref/prompt", name=ref["name"])
            if ref["type"] == "ref/prompt"
            else types.ResourceTemplateReference(type="ref/resource", uri=ref["uri"])
        )
        await self.step(
            "completions", {"ref": ref, "argument": arg, "context": ctx}, lambda: c.complete(model, arg, ctx)
        )

    async def script_fixture(self, c: Client) -> None:
        await self.set_level(c, "debug")
        await self.call(c, "echo", {"text": "hello sluice"})
        await self.call(c, "echo", {"text": "unicode: żółć ✓ 🚰"})
        await self.call(c, "structured", {"n": 3})
        await self.call(c, "sleep", {"seconds": 1})
        await self.call(c, "big", {"bytes": 1000})
        await self.call(c, "big", {"bytes": 300000})
        await self.call(c, "log", {"level": "warning", "message": "fixture warning"})
        await self.call(c, "log", {"level": "debug", "message": "fixture debug"})
        await self.call(c, "ask_sampling", {"prompt": "what is sluice?"})
        await self.call(c, "ask_elicitation", {"message": "continue?"})
        await self.call(c, "roots", {})
        await self.call(c, "echo", {})  # invalid arguments
        await self.call(c, "no-such-tool", {})

        for uri in ("fixture://greeting", "fixture://items/42", "fixture://nope"):
            await self.step("resource_reads", {"uri": uri}, lambda uri=uri: c.read_resource(uri))
        for name, pargs in (("greet", {"name": "Ada"}), ("greet", None), ("no-such-prompt", None)):
            await self.step(
                "prompt_gets", {"name": name, "args": pargs}, lambda n=name, a=pargs: c.get_prompt(n, a)
            )
        await self.complete(c, {"type": "ref/prompt", "name": "greet"}, {"name": "name", "value": "A"}, None)
        await self.complete(c, {"type": "ref/resource", "uri": "fixture://items/{id}"}, {"name": "id", "value": ""},
                            None)

    def finish(self, normalizer: Normalizer) -> dict[str, Any]:
        t = normalizer(self.t)
        t["logs"] = sorted(t["logs"], key=lambda x: json.dumps(x, sort_keys=True))
        if "server_requests" in t:
            t["server_requests"] = sorted(t["server_requests"], key=lambda x: json.dumps(x, sort_keys=True))
        return t


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--stdio", metavar="'CMD ARGS...'", help="server command line (split with shlex)")
    target.add_argument("--url", help="streamable HTTP endpoint, e.g. http://127.0.0.1:3001/mcp")
    p.add_argument("--script", choices=["everything", "fixture", "generic"], default="generic")
    p.add_argument("--declare", default="", help="comma list of client capabilities: sampling,elicitation,roots")
    p.add_argument("--settle", type=float, default=0.5, help="seconds to wait after connect and before exit")
    p.add_argument("--timeout", type=float, default=120.0, help="overall session timeout in seconds")
    p.add_argument("--raw-strings", action="store_true", help="do not digest strings longer than 8192 chars")
    p.add_argument("--drop-meta", action="append", default=[], metavar="KEY", help="remove _meta[KEY] everywhere")
    a = p.parse_args(argv)
    bad = {d.strip() for d in a.declare.split(",") if d.strip()} - {"sampling", "elicitation", "roots"}
    if bad:
        p.error(f"unknown --declare value(s): {', '.join(sorted(bad))}")
    return a


class Warnings(logging.Handler):
    """The SDK's own warnings during the session (what its user would see
    on stderr): a client must see no more through sluice than directly."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def amain(args: argparse.Namespace) -> int:
    rec = Recorder(args)
    sdk_warnings = Warnings()
    logging.getLogger("mcp").addHandler(sdk_warnings)
    if args.stdio:
        argv = shlex.split(args.stdio)
        server: Any = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    else:
        server = args.url
    kwargs: dict[str, Any] = {}
    if "sampling" in rec.declare:
        kwargs["sampling_callback"] = rec.on_sampling
    if "elicitation" in rec.declare:
        kwargs["elicitation_callback"] = rec.on_elicit
    if "roots" in rec.declare:
        kwargs["list_roots_callback"] = rec.on_roots
    client = Client(
        server,
        mode=args.mode,
        logging_callback=rec.on_log,
        message_handler=rec.on_message,
        log_level="debug",  # 2026-07-28 per-request log opt-in; no effect on handshake-era sessions
        cache=None,  # every request must reach the server
        read_timeout_seconds=60,
        client_info=types.Implementation(name="sluice-transcript-py", version="1.0.0"),
        **kwargs,
    )
    connected = False
    try:
        with anyio.fail_after(args.timeout):
            async with client:
                connected = True
                await rec.run(client)
    except TimeoutError:
        print(f"transcript.py: session timed out after {args.timeout}s", file=sys.stderr)
        return 3
    except Exception as e:  # noqa: BLE001
        if not connected:
            print(f"transcript.py: connect failed: {error_of(e)}", file=sys.stderr)
            return 2
        print(f"transcript.py: session failed: {error_of(e)}", file=sys.stderr)
        return 4
    out = rec.finish(Normalizer(args.raw_strings, args.drop_meta))
    out["client_warnings"] = sorted(sdk_warnings.messages)
    sys.stdout.write(json.dumps(out, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


def main() -> None:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    sys.exit(anyio.run(amain, parse_args()))


if __name__ == "__main__":
    main()
