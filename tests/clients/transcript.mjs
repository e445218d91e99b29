#!/usr/bin/env node
/**
 * Scripted MCP session -> normalized JSON transcript, using the TypeScript MCP SDK v1 client.
 *
 * Companion of transcript.py (same CLI minus --mode, same transcript schema); see
 * tests/clients/README.md.
 *
 *   node transcript.mjs (--stdio 'CMD ARGS...' | --url URL)
 *        [--script everything|fixture|generic] [--declare sampling,elicitation,roots]
 *        [--settle SECONDS] [--timeout SECONDS] [--raw-strings] [--drop-meta KEY]...
 *
 * The SDK is loaded from $SLUICE_PEERS/npm/node_modules/@modelcontextprotocol/sdk (ESM ignores
 * NODE_PATH, so an absolute import is used); without SLUICE_PEERS it falls back to a bare
 * `@modelcontextprotocol/sdk` import (a node_modules next to / above this file). Node >= 20.
 *
 * The TS v1 client always uses the initialize handshake (protocol <= 2025-11-25), so the
 * transcript's "mode" is "legacy"; `--mode legacy` is accepted as a no-op.
 *
 * Results, errors and server->client request params are recorded as the raw JSON-RPC
 * `result`/`error`/`params` objects seen on the wire (the SDK still validates them).
 *
 * Exit codes: 0 transcript printed, 1 usage, 2 connect failed, 3 session timeout, 4 session broke.
 */

import { createHash } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const LONG_STRING = 8192;
const BIG_ECHO_LEN = 200 * 1024;
const FIXED_ROOTS = [{ uri: "file:///tmp", name: "tmp" }];
const SAMPLING_MODEL = "sluice-test-model";

// ------------------------------------------------------------------------------ SDK loading

async function loadSdk() {
  const peers = process.env.SLUICE_PEERS;
  const sub = ["client/index.js", "client/stdio.js", "client/streamableHttp.js", "types.js"];
  let base;
  if (peers) {
    base = (p) =>
      pathToFileURL(join(peers, "npm", "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm", p)).href;
  } else {
    base = (p) => `@modelcontextprotocol/sdk/${p}`;
  }
  const [client, stdio, http, types] = await Promise.all(sub.map((p) => import(base(p))));
  return { ...client, ...stdio, ...http, ...types };
}

// ------------------------------------------------------------------------------ CLI

function usage(msg) {
  if (msg) process.stderr.write(`transcript.mjs: ${msg}\n`);
  process.stderr.write(
    "usage: transcript.mjs (--stdio 'CMD ARGS...' | --url URL) [--script everything|fixture|generic]\n" +
      "                      [--declare sampling,elicitation,roots] [--settle S] [--timeout S]\n" +
      "                      [--raw-strings] [--drop-meta KEY]...\n",
  );
  process.exit(1);
}

function parseArgs(argv) {
  const a = { script: "generic", declare: "", settle: 0.5, timeout: 120, rawStrings: false, dropMeta: [] };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(`${k} needs a value`);
      return argv[++i];
    };
    let key = k;
    let inline;
    if (k.startsWith("--") && k.includes("=")) {
      key = k.slice(0, k.indexOf("="));
      inline = k.slice(k.indexOf("=") + 1);
    }
    const v = () => (inline !== undefined ? inline : val());
    switch (key) {
      case "--stdio": a.stdio = v(); break;
      case "--url": a.url = v(); break;
      case "--script": a.script = v(); break;
      case "--declare": a.declare = v(); break;
      case "--settle": a.settle = Number(v()); break;
      case "--timeout": a.timeout = Number(v()); break;
      case "--raw-strings": a.rawStrings = true; break;
      case "--drop-meta": a.dropMeta.push(v()); break;
      case "--mode": if (v() !== "legacy") usage("the TS v1 client only supports --mode legacy"); break;
      case "-h": case "--help": usage(); break;
      default: usage(`unknown argument ${k}`);
    }
  }
  if (!a.stdio === !a.url) usage("exactly one of --stdio or --url is required");
  if (!["everything", "fixture", "generic"].includes(a.script)) usage(`bad --script ${a.script}`);
  a.declareSet = new Set(a.declare.split(",").map((s) => s.trim()).filter(Boolean));
  for (const d of a.declareSet) if (!["sampling", "elicitation", "roots"].includes(d)) usage(`bad --declare ${d}`);
  return a;
}

/** POSIX-shell-like split (quotes and backslashes), equivalent to Python's shlex.split for our uses. */
function shlexSplit(s) {
  const out = [];
  let cur = "";
  let has = false;
  let q = null;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (q === "'") {
      if (c === "'") q = null; else cur += c;
    } else if (q === '"') {
      if (c === '"') q = null;
      else if (c === "\\" && i + 1 < s.length && '"\\$`'.includes(s[i + 1])) cur += s[++i];
      else cur += c;
    } else if (c === "'" || c === '"') { q = c; has = true; }
    else if (c === "\\" && i + 1 < s.length) { cur += s[++i]; has = true; }
    else if (/\s/.test(c)) { if (has || cur) out.push(cur); cur = ""; has = false; }
    else { cur += c; }
  }
  if (q) usage("unterminated quote in --stdio");
  if (has || cur) out.push(cur);
  return out;
}

// ------------------------------------------------------------------------------ normalization

const TIME_RE = /\b\d{1,2}:\d{2}:\d{2}(?:[ \u202f\u00a0]?[AaPp]\.?[Mm]\.?)?/g;
const ISO_RE = /\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?/g;
const UUID_RE = /\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b/g;

function normText(s) {
  return s.replace(ISO_RE, "<TIMESTAMP>").replace(TIME_RE, "<TIME>").replace(UUID_RE, "<UUID>");
}

function makeNormalizer(rawStrings, dropMeta) {
  const drop = new Set(dropMeta);
  const string = (s) => {
    s = normText(s);
    if (!rawStrings && s.length > LONG_STRING) {
      const cps = Array.from(s);
      if (cps.length > LONG_STRING) {
        const digest = createHash("sha256").update(s, "utf8").digest("hex");
        s = `<sha256:${digest} len:${cps.length} head:${cps.slice(0, 64).join("")}>`;
      }
    }
    return s;
  };
  const blob = (b) => {
    const buf = Buffer.from(b, "base64");
    if (buf.toString("base64") === b) {
      try {
        const text = new TextDecoder("utf-8", { fatal: true }).decode(buf);
        const normed = normText(text);
        if (normed !== text) b = Buffer.from(normed, "utf8").toString("base64");
      } catch {
        /* binary: keep */
      }
    }
    return string(b);
  };
  const norm = (v) => {
    if (Array.isArray(v)) return v.map(norm);
    if (v && typeof v === "object") {
      const out = {};
      for (let [k, x] of Object.entries(v)) {
        if (x === undefined) continue;
        if (k === "_meta" && x && typeof x === "object" && drop.size) {
          x = Object.fromEntries(Object.entries(x).filter(([mk]) => !drop.has(mk)));
          if (Object.keys(x).length === 0) continue;
        }
        out[k] = k === "blob" && typeof x === "string" ? blob(x) : norm(x);
      }
      return out;
    }
    if (typeof v === "string") return string(v);
    return v;
  };
  return norm;
}

function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === "object") {
    const out = {};
    for (const k of Object.keys(v).sort(cmpPy)) out[k] = sortKeys(v[k]);
    return out;
  }
  return v;
}

/** Code-point order (what Python's sort_keys uses). */
function cmpPy(a, b) {
  const A = Array.from(a, (c) => c.codePointAt(0));
  const B = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(A.length, B.length); i++) if (A[i] !== B[i]) return A[i] - B[i];
  return A.length - B.length;
}

const canon = (x) => JSON.stringify(sortKeys(x));
const byCanon = (a, b) => cmpPy(canon(a), canon(b));

// ------------------------------------------------------------------------------ helpers

function bigMessage(n) {
  const body = "the quick brown fox jumps over the lazy dog 0123456789"; // 54 chars
  const out = [];
  let size = 0;
  for (let i = 0; size < n; i++) {
    const line = `${String(i).padStart(8, "0")} ${body}\n`;
    out.push(line);
    size += line.length;
  }
  return out.join("").slice(0, n);
}

/** Deterministic elicitation answer for a requested schema (same rules as transcript.py). */
function fillSchema(schema) {
  const content = {};
  const props = (schema && schema.properties) || {};
  for (const name of Object.keys(props).sort(cmpPy)) {
    const p = props[name] || {};
    if ("default" in p) content[name] = p.default;
    else if (p.enum && p.enum.length) content[name] = p.enum[0];
    else if (p.oneOf && p.oneOf.length) content[name] = p.oneOf[0].const;
    else if (p.type === "boolean") content[name] = true;
    else if (p.type === "integer" || p.type === "number") content[name] = p.minimum ?? 1;
    else if (p.type === "array") {
      const items = p.items || {};
      const first = (items.enum || [null])[0] ?? ((items.anyOf || [{}])[0] || {}).const;
      content[name] = first !== undefined && first !== null ? [first] : [];
    } else if (p.format === "email") content[name] = "sluice@example.com";
    else if (p.format === "uri") content[name] = "https://example.com/sluice";
    else if (p.format === "date") content[name] = "2000-01-01";
    else content[name] = "sluice";
  }
  return content;
}

function samplingReplyText(messages) {
  const texts = [];
  for (const m of messages || []) {
    const cs = Array.isArray(m.content) ? m.content : [m.content];
    for (const c of cs) if (c && c.type === "text") texts.push(c.text ?? "");
  }
  return "sluice test reply to: " + texts.join(" | ");
}

const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));

// ------------------------------------------------------------------------------ session

/** The JSON document that sluice's pages walk (whole items or members, slices of
 * scalars too large for a page, and the members shown around a paged value), put
 * back together in order. */
function rebuild(pages) {
  const placed = [];
  const objects = new Set();
  const slices = new Map();
  const keep = Symbol("keep"); // keeps the place of a member paged later
  const tokens = (pointer) =>
    pointer.split("/").slice(1).map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
  const pointerOf = (ts) => ts.map((t) => "/" + t.replaceAll("~", "~0").replaceAll("/", "~1")).join("");
  for (const [meta, data] of pages) {
    for (const around of meta.around ?? []) {
      objects.add(around.path);
      const members = Object.entries(around.members);
      members.splice(around.index, 0, [around.key, keep]);
      for (const [k, v] of members) placed.push([[...tokens(around.path), k], v]);
    }
    if (meta.form === "items") {
      JSON.parse(data).forEach((v, i) => placed.push([[...tokens(meta.path), String(meta.start + i)], v]));
    } else if (meta.form === "members") {
      objects.add(meta.path);
      for (const [k, v] of Object.entries(JSON.parse(data))) placed.push([[...tokens(meta.path), k], v]);
    } else {
      slices.set(meta.path, (slices.get(meta.path) ?? "") + data);
      if (meta.end === meta.total) {
        placed.push([tokens(meta.path), JSON.parse(slices.get(meta.path))]);
        slices.delete(meta.path);
      }
    }
  }
  const root = [undefined];
  for (const [at, value] of placed) {
    let parent = root;
    let key = 0;
    at.forEach((token, depth) => {
      let here = parent[key];
      if (here === undefined || here === keep) {
        here = objects.has(pointerOf(at.slice(0, depth))) ? {} : [];
        parent[key] = here;
      }
      parent = here;
      key = Array.isArray(here) ? Number(token) : token;
    });
    if (value !== keep || parent[key] === undefined) parent[key] = value;
  }
  return root[0];
}

class Recorder {
  constructor(args, sdk) {
    this.args = args;
    this.sdk = sdk;
    this.declare = args.declareSet;
    this.t = {
      driver: "typescript-mcp-sdk-1",
      mode: "legacy",
      script: args.script,
      declared: [...this.declare].sort(),
      calls: [],
      progress: {},
      resources: [],
      resource_reads: [],
      templates: [],
      prompts: [],
      prompt_gets: [],
      completions: [],
      logs: [],
    };
    if (this.declare.size) this.t.server_requests = [];
    this.toolsChanged = 0;
    this.protocolVersion = null;
    this.lastRequestId = undefined;
    this.raw = new Map(); // request id -> raw JSON-RPC response (result or error)
    this.progressByToken = new Map(); // progress token -> [[progress, total, message], ...]
    this.rawRequests = new Map(); // server->client request id -> raw params
  }

  /** Wrap the transport to see the raw JSON-RPC traffic (ids, raw results, protocol version). */
  tap(transport) {
    const start = transport.start.bind(transport);
    transport.start = async () => {
      const handler = transport.onmessage;
      transport.onmessage = (msg, extra) => {
        if (msg && msg.method === "notifications/progress" && msg.params) {
          // Recorded here, not via the SDK's onprogress: SDK v1 dispatches notifications in a
          // microtask but responses synchronously, so a progress notification that arrives in the
          // same read chunk as the response is dropped ("unknown token") - chunking-dependent.
          const p = msg.params;
          const list = this.progressByToken.get(p.progressToken) ?? [];
          list.push([p.progress, p.total ?? null, p.message ?? null]);
          this.progressByToken.set(p.progressToken, list);
        }
        if (msg && msg.id !== undefined && msg.method !== undefined) {
          this.rawRequests.set(msg.id, msg.params ?? null); // server -> client request, as sent
        }
        if (msg && msg.id !== undefined && msg.method === undefined) {
          this.raw.set(msg.id, msg);
          if (msg.result && typeof msg.result.protocolVersion === "string" && this.protocolVersion === null) {
            this.protocolVersion = msg.result.protocolVersion;
          }
        }
        handler?.(msg, extra);
      };
      return start();
    };
    const send = transport.send.bind(transport);
    transport.send = async (msg, opts) => {
      if (msg && msg.method !== undefined && msg.id !== undefined) {
        this.lastRequestId = msg.id;
        const token = msg.params?._meta?.progressToken;
        if (token !== undefined) this.lastProgressToken = token;
      }
      return send(msg, opts);
    };
  }

  /** Run one client request; return {result} (raw wire result) or {error}. */
  async request(fn) {
    this.lastRequestId = undefined;
    try {
      const parsed = await fn();
      const raw = this.raw.get(this.lastRequestId);
      return { result: raw && raw.result !== undefined ? raw.result : parsed };
    } catch (e) {
      const raw = this.raw.get(this.lastRequestId);
      if (raw && raw.error) return { error: raw.error };
      return { error: { exception: e?.constructor?.name ?? "Error", message: String(e?.message ?? e) } };
    } finally {
      this.raw.clear();
    }
  }

  /** Raw params of a server->client request (the SDK's parsed copy drops unknown keys). */
  serverParams(req, extra) {
    const raw = this.rawRequests.get(extra?.requestId);
    this.rawRequests.delete(extra?.requestId);
    return structuredClone(raw !== undefined ? raw : (req.params ?? null));
  }

  installHandlers(client) {
    const S = this.sdk;
    client.setNotificationHandler(S.LoggingMessageNotificationSchema, (n) => {
      this.t.logs.push(n.params);
    });
    client.setNotificationHandler(S.ToolListChangedNotificationSchema, () => {
      this.toolsChanged++;
    });
    if (this.declare.has("sampling")) {
      client.setRequestHandler(S.CreateMessageRequestSchema, async (req, extra) => {
        this.t.server_requests.push({ method: "sampling/createMessage", params: this.serverParams(req, extra) });
        return {
          role: "assistant",
          content: { type: "text", text: samplingReplyText(req.params.messages) },
          model: SAMPLING_MODEL,
          stopReason: "endTurn",
        };
      });
    }
    if (this.declare.has("elicitation")) {
      client.setRequestHandler(S.ElicitRequestSchema, async (req, extra) => {
        this.t.server_requests.push({ method: "elicitation/create", params: this.serverParams(req, extra) });
        if (req.params.mode === "url") return { action: "accept" };
        return { action: "accept", content: fillSchema(req.params.requestedSchema) };
      });
    }
    if (this.declare.has("roots")) {
      client.setRequestHandler(S.ListRootsRequestSchema, async (req, extra) => {
        this.t.server_requests.push({ method: "roots/list", params: this.serverParams(req, extra) });
        return { roots: FIXED_ROOTS };
      });
    }
  }

  async call(client, tool, args) {
    const prog = (this.t.progress[tool] ??= []);
    const entry = { tool, args };
    this.lastProgressToken = undefined;
    const r = await this.request(() =>
      client.callTool({ name: tool, arguments: args }, undefined, {
        timeout: 60000,
        onprogress: () => {}, // makes the SDK send a progressToken; progress is recorded in tap()
      }),
    );
    prog.push(...(this.progressByToken.get(this.lastProgressToken) ?? []));
    this.progressByToken.clear();
    if (r.result) r.result = await this.unstore(client, r.result);
    this.t.calls.push(Object.assign(entry, r));
  }

  /** A result sluice stored (too large for the budget), read back whole with sluice_read:
   * the text of a stored text result, as the one text block the upstream sent. */
  async unstore(client, result) {
    const stored = result._meta?.["sluice/stored"];
    if (!stored) return result;
    delete result._meta["sluice/stored"];
    if (Object.keys(result._meta).length === 0) delete result._meta;
    let request = { handle: stored.handle };
    const pages = [];
    for (;;) {
      const page = await client.callTool({ name: "sluice_read", arguments: request });
      pages.push([page._meta["sluice/page"], page.content[0].text]);
      const cursor = page._meta["sluice/page"].next_cursor;
      if (!cursor) break;
      request = { cursor };
    }
    const text =
      stored.kind === "text" ? pages.map(([, data]) => data).join("") : JSON.stringify(rebuild(pages));
    result.content = [{ type: "text", text }];
    return result;
  }

  async step(key, entry, fn) {
    this.t[key].push(Object.assign(entry, await this.request(fn)));
  }

  async setLevel(client, level) {
    this.t.set_level = Object.assign({ level }, await this.request(() => client.setLoggingLevel(level)));
  }

  async listAll(client) {
    const paged = async (fetch, attr) => {
      const items = [];
      let cursor;
      for (;;) {
        const page = await fetch(cursor ? { cursor } : undefined);
        items.push(...page[attr]);
        cursor = page.nextCursor;
        if (!cursor) return items;
      }
    };
    // Raw tool definitions: capture each page's wire result.
    const tools = await paged(async (params) => {
      const r = await this.request(() => client.listTools(params));
      if (r.error) throw Object.assign(new Error(r.error.message), { rpc: r.error });
      return r.result;
    }, "tools");
    this.t.tools = [...tools].sort((a, b) => cmpPy(a.name, b.name));
    const caps = client.getServerCapabilities() || {};
    for (const [key, method, attr, sortKey] of [
      ["resources", "listResources", "resources", "uri"],
      ["templates", "listResourceTemplates", "resourceTemplates", "uriTemplate"],
      ["prompts", "listPrompts", "prompts", "name"],
    ]) {
      if (!(key === "prompts" ? caps.prompts : caps.resources)) continue;
      try {
        const got = await paged(async (params) => {
          const r = await this.request(() => client[method](params));
          if (r.error) throw Object.assign(new Error(r.error.message), { rpc: r.error });
          return r.result;
        }, attr);
        this.t[key] = [...got].sort((a, b) => cmpPy(a[sortKey], b[sortKey]));
      } catch (e) {
        this.t[key] = { error: e.rpc ?? { exception: e?.constructor?.name ?? "Error", message: String(e?.message) } };
      }
    }
    return tools;
  }

  async run(client) {
    const info = client.getServerVersion();
    this.t.protocol_version = this.protocolVersion;
    if (info) {
      this.t.server_name = info.name;
      this.t.server_version = info.version;
    }
    this.t.server_capabilities = client.getServerCapabilities();
    this.t.instructions = client.getInstructions() ?? null;

    // Servers may register tools only after the handshake (server-everything adds
    // capability-dependent tools then, announcing them with notifications/tools/list_changed).
    await sleep(this.args.settle);
    const seen = this.toolsChanged;
    const tools = await this.listAll(client);
    const names = new Set(tools.map((x) => x.name));

    if (this.args.script === "everything") await this.scriptEverything(client, names);
    else if (this.args.script === "fixture") await this.scriptFixture(client);

    await sleep(this.args.settle);
    if (this.toolsChanged !== seen) await this.listAll(client);
  }

  async scriptEverything(c, names) {
    await this.setLevel(c, "debug");
    await this.call(c, "echo", { message: "hello sluice" });
    await this.call(c, "echo", { message: bigMessage(BIG_ECHO_LEN) });
    const add = names.has("get-sum") ? "get-sum" : names.has("add") ? "add" : "get-sum";
    await this.call(c, add, { a: 2, b: 40 });
    await this.call(c, "get-structured-content", { location: "Chicago" });
    await this.call(c, "get-resource-links", { count: 3 });
    await this.call(c, "get-tiny-image", {});
    await this.call(c, "get-annotated-message", { messageType: "success", includeImage: true });
    await this.call(c, "get-resource-reference", { resourceType: "Text", resourceId: 2 });
    await this.call(c, "trigger-long-running-operation", { duration: 2, steps: 4 });
    await this.call(c, "echo", {}); // invalid arguments
    await this.call(c, "no-such-tool", {});
    if (names.has("trigger-sampling-request"))
      await this.call(c, "trigger-sampling-request", { prompt: "say hi", maxTokens: 20 });
    if (names.has("trigger-elicitation-request")) await this.call(c, "trigger-elicitation-request", {});
    if (names.has("get-roots-list")) await this.call(c, "get-roots-list", {});

    const resources = Array.isArray(this.t.resources) ? this.t.resources : [];
    const uris = [
      ...resources.map((r) => r.uri).slice(0, 2),
      "demo://resource/dynamic/text/1",
      "demo://resource/dynamic/blob/2",
      "demo://resource/does-not-exist",
    ];
    for (const uri of uris) await this.step("resource_reads", { uri }, () => c.readResource({ uri }));

    for (const [name, pargs] of [
      ["simple-prompt", null],
      ["args-prompt", { city: "Paris", state: "Texas" }],
      ["completable-prompt", { department: "Engineering", name: "Alice" }],
      ["resource-prompt", { resourceType: "Text", resourceId: "1" }],
      ["no-such-prompt", null],
    ]) {
      await this.step("prompt_gets", { name, args: pargs }, () =>
        c.getPrompt(pargs ? { name, arguments: pargs } : { name }),
      );
    }

    for (const [ref, arg, ctx] of [
      [{ type: "ref/prompt", name: "completable-prompt" }, { name: "department", value: "E" }, null],
      [{ type: "ref/prompt", name: "completable-prompt" }, { name: "name", value: "A" }, { department: "Engineering" }],
      [{ type: "ref/resource", uri: "demo://resource/dynamic/text/{resourceId}" }, { name: "resourceId", value: "7" }, null],
    ]) {
      await this.complete(c, ref, arg, ctx);
    }
  }

  async complete(c, ref, arg, ctx) {
    const params = { ref, argument: arg };
    if (ctx) params.context = { arguments: ctx };
    await this.step("completions", { ref, argument: arg, context: ctx }, () => c.complete(params));
  }

  async scriptFixture(c) {
    await this.setLevel(c, "debug");
    await this.call(c, "echo", { text: "hello sluice" });
    await this.call(c, "echo", { text: "unicode: żółć ✓ 🚰" });
    await this.call(c, "structured", { n: 3 });
    await this.call(c, "sleep", { seconds: 1 });
    await this.call(c, "big", { bytes: 1000 });
    await this.call(c, "big", { bytes: 300000 });
    await this.call(c, "log", { level: "warning", message: "fixture warning" });
    await this.call(c, "log", { level: "debug", message: "fixture debug" });
    await this.call(c, "ask_sampling", { prompt: "what is sluice?" });
    await this.call(c, "ask_elicitation", { message: "continue?" });
    await this.call(c, "roots", {});
    await this.call(c, "echo", {}); // invalid arguments
    await this.call(c, "no-such-tool", {});

    for (const uri of ["fixture://greeting", "fixture://items/42", "fixture://nope"])
      await this.step("resource_reads", { uri }, () => c.readResource({ uri }));
    for (const [name, pargs] of [["greet", { name: "Ada" }], ["greet", null], ["no-such-prompt", null]]) {
      await this.step("prompt_gets", { name, args: pargs }, () =>
        c.getPrompt(pargs ? { name, arguments: pargs } : { name }),
      );
    }
    await this.complete(c, { type: "ref/prompt", name: "greet" }, { name: "name", value: "A" }, null);
    await this.complete(c, { type: "ref/resource", uri: "fixture://items/{id}" }, { name: "id", value: "" }, null);
  }

  finish(norm) {
    const t = norm(this.t);
    t.logs.sort(byCanon);
    if (t.server_requests) t.server_requests.sort(byCanon);
    return sortKeys(t);
  }
}

// ------------------------------------------------------------------------------ main

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const sdk = await loadSdk();
  const rec = new Recorder(args, sdk);

  const capabilities = {};
  if (rec.declare.has("sampling")) capabilities.sampling = {};
  if (rec.declare.has("elicitation")) capabilities.elicitation = { form: {}, url: {} };
  if (rec.declare.has("roots")) capabilities.roots = { listChanged: true };
  const client = new sdk.Client({ name: "sluice-transcript-ts", version: "1.0.0" }, { capabilities });
  rec.installHandlers(client);

  let transport;
  if (args.stdio) {
    const argv = shlexSplit(args.stdio);
    if (!argv.length) usage("empty --stdio command");
    transport = new sdk.StdioClientTransport({
      command: argv[0],
      args: argv.slice(1),
      env: Object.fromEntries(Object.entries(process.env).filter(([, v]) => v !== undefined)),
      stderr: "inherit",
    });
  } else {
    transport = new sdk.StreamableHTTPClientTransport(new URL(args.url));
  }
  rec.tap(transport);

  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error("timeout"), { code: "SESSION_TIMEOUT" })), args.timeout * 1000);
  });

  let connected = false;
  const session = (async () => {
    await client.connect(transport);
    connected = true;
    await rec.run(client);
  })();

  let rc = 0;
  try {
    await Promise.race([session, timeout]);
  } catch (e) {
    if (e && e.code === "SESSION_TIMEOUT") {
      process.stderr.write(`transcript.mjs: session timed out after ${args.timeout}s\n`);
      rc = 3;
    } else if (!connected) {
      process.stderr.write(`transcript.mjs: connect failed: ${e?.stack ?? e}\n`);
      rc = 2;
    } else {
      process.stderr.write(`transcript.mjs: session failed: ${e?.stack ?? e}\n`);
      rc = 4;
    }
  } finally {
    clearTimeout(timer);
  }

  // Close like the Python client does: DELETE the HTTP session, then close the transport.
  const closing = (async () => {
    if (args.url && transport.sessionId) {
      try { await transport.terminateSession(); } catch { /* ignore */ }
    }
    try { await client.close(); } catch { /* ignore */ }
  })();
  await Promise.race([closing, sleep(10)]);

  if (rc === 0) {
    const out = rec.finish(makeNormalizer(args.rawStrings, args.dropMeta));
    await new Promise((r) => process.stdout.write(JSON.stringify(out, null, 1) + "\n", r));
  }
  process.exit(rc);
}

main().catch((e) => {
  process.stderr.write(`transcript.mjs: ${e?.stack ?? e}\n`);
  process.exit(4);
});
