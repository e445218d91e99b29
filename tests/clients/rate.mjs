#!/usr/bin/env node
/**
 * Keep-alive throughput of the TypeScript MCP SDK v1 client over Streamable HTTP: C clients,
 * each its own session, call `echo` one after another for S seconds.
 *
 *   node rate.mjs --url URL [--clients C] [--seconds S] [--bearer TOKEN]
 *
 * Prints one JSON line: {"calls": N, "seconds": S, "clients": C}. Used by
 * crates/sluice/benches/keepalive.rs. The SDK is loaded as transcript.mjs does.
 */

import { join } from "node:path";
import { pathToFileURL } from "node:url";

async function loadSdk() {
  const peers = process.env.SLUICE_PEERS;
  const base = peers
    ? (p) => pathToFileURL(join(peers, "npm", "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm", p)).href
    : (p) => `@modelcontextprotocol/sdk/${p}`;
  const [client, http] = await Promise.all(["client/index.js", "client/streamableHttp.js"].map((p) => import(base(p))));
  return { ...client, ...http };
}

const args = { clients: 1, seconds: 5, bearer: null, url: null };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, "");
  if (!(key in args)) {
    process.stderr.write(`rate.mjs: unknown option ${process.argv[i]}\n`);
    process.exit(1);
  }
  args[key] = key === "url" || key === "bearer" ? process.argv[i + 1] : Number(process.argv[i + 1]);
}
if (!args.url) {
  process.stderr.write("usage: rate.mjs --url URL [--clients C] [--seconds S] [--bearer TOKEN]\n");
  process.exit(1);
}

const { Client, StreamableHTTPClientTransport } = await loadSdk();
const requestInit = args.bearer ? { headers: { Authorization: `Bearer ${args.bearer}` } } : undefined;
const clients = [];
for (let i = 0; i < args.clients; i++) {
  const client = new Client({ name: "rate", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(args.url), { requestInit }));
  // Warm up: the first calls set up connections and caches.
  for (let w = 0; w < 20; w++) await client.callTool({ name: "echo", arguments: { text: "a small result" } });
  clients.push(client);
}
const end = performance.now() + args.seconds * 1000;
const counts = await Promise.all(
  clients.map(async (client) => {
    let n = 0;
    while (performance.now() < end) {
      const result = await client.callTool({ name: "echo", arguments: { text: "a small result" } });
      if (result.isError) throw new Error(`echo failed: ${JSON.stringify(result)}`);
      n++;
    }
    return n;
  }),
);
for (const client of clients) await client.close();
process.stdout.write(JSON.stringify({ calls: counts.reduce((a, b) => a + b, 0), seconds: args.seconds, clients: args.clients }) + "\n");
