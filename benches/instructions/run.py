#!/usr/bin/env python3
"""What sluice's own code costs per call, measured two steady ways.

1. Instructions, counted by `valgrind --tool=callgrind` in the gateway
   process only (its upstream runs natively): the count for N calls minus
   the count for fewer, divided by the difference, so start-up cancels out.
   The same binary and input give the same count on every run, on any
   machine load: a change of 2 % shows, where wall-clock figures on a
   shared VM move by 10 %.
   - a small call: `echo` of `sluice sample-server`, 1,200 minus 200 calls;
   - a 1 MB stored result: from an upstream that answers at once (the
     tests' hand-written server, `tests/fixtures/raw_server.py`, its `huge`
     tool: a 1 MiB text block holding a JSON array), 6 minus 2 calls;
   - a small call over HTTP: sluice listening in front of `sluice
     sample-server --listen`, a client in a 2025-11-25 session on one
     kept-alive connection, 1,200 minus 200 calls.
   With `--footprint`: the code a small call runs, as the distinct 64-byte
   lines of code holding an instruction run at least 1,000 times in 1,200
   calls (callgrind with `--dump-instr=yes`). A call whose code and data
   have gone cold between two calls (as they have when a model's calls
   come seconds apart) fetches that code again: beside the instructions'
   count, it is what a call costs cold. Any stdio MCP server can be
   measured the same way (`--footprint-of CMD...`: the passthrough bench's
   relays, say).
2. Time to the answer of the 1 MB stored result, with that instant
   upstream, through sluice and directly: the p50 of 100 sequential calls
   each, directly and through each binary interleaved call by call. The upstream's own work is nil, so the difference
   is sluice's reading, storing and answering.

usage: benches/instructions/run.py [--footprint] [SLUICE_BINARY ...]
       benches/instructions/run.py --footprint-of COMMAND [ARG ...]
   (default: target/release/sluice; several binaries are measured side by
   side). Needs valgrind for (1); `--time-only` skips it.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))


class Session:
    """An MCP server over stdio (`command`), initialized and listed."""

    def __init__(self, command):
        self.command = command
        self.child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "instructions", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.request("tools/list", {})

    def send(self, message):
        self.child.stdin.write((json.dumps(message) + "\n").encode())
        self.child.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.child.stdout.readline()
            if not line:
                raise SystemExit(f"{self.command[0]} ended without answering")
            message = json.loads(line)
            if "id" in message and ("result" in message or "error" in message):
                return message

    def call(self, tool, arguments):
        """One call's seconds, to its whole answer read."""
        start = time.perf_counter()
        message = self.request("tools/call", {"name": tool, "arguments": arguments})
        seconds = time.perf_counter() - start
        if "result" not in message:
            raise SystemExit(f"call failed: {message}")
        return seconds

    def close(self):
        self.child.stdin.close()
        self.child.wait()


def drive(command, calls, tool, arguments):
    """Runs `command` (an MCP server over stdio), initializes it, makes
    `calls` sequential calls of `tool`; returns each call's seconds."""
    session = Session(command)
    times = [session.call(tool, arguments) for _ in range(calls)]
    session.close()
    return times


def drive_interleaved(commands, calls, tool, arguments):
    """`drive` of each of `commands` at once, their calls interleaved one
    by one (each turn in another order), so that what the machine does
    meanwhile falls on all alike; returns each command's seconds."""
    sessions = [Session(command) for command in commands]
    times = [[] for _ in commands]
    for i in range(calls):
        for k in range(len(sessions)):
            k = (k + i) % len(sessions)
            times[k].append(sessions[k].call(tool, arguments))
    for session in sessions:
        session.close()
    return times


def instructions(sluice, upstream, calls, tool, arguments):
    """callgrind's instruction count of the gateway for each of `calls`
    (two counts of calls); returns the count per call between them."""
    totals = []
    for n in calls:
        out = f"/tmp/sluice-instructions-{os.getpid()}-{n}.out"
        drive(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sluice, "--"] + upstream,
              n, tool, arguments)
        with open(out) as f:
            totals.append(next(int(l.split()[1]) for l in f if l.startswith("totals:")))
        os.remove(out)
    return (totals[1] - totals[0]) / (calls[1] - calls[0])


def free_port():
    """A port free on loopback a moment ago (the bench's own, not a test's)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port, process):
    """Waits until something listens on `port` (at most 60 s: valgrind
    starts slowly)."""
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"{process.args[0]} ended before it listened on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def drive_http(url, calls):
    """A 2025-11-25 client session at `url` (kept alive): `initialize`,
    then `calls` sequential `echo` calls."""
    parts = urllib.parse.urlparse(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port)
    headers = {"Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25",
               "Accept": "application/json, text/event-stream"}

    def post(message):
        connection.request("POST", parts.path, json.dumps(message), headers)
        response = connection.getresponse()
        return response, response.read()

    response, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "instructions", "version": "1"}}})
    headers["Mcp-Session-Id"] = response.getheader("Mcp-Session-Id")
    post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for i in range(calls):
        response, body = post({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                               "params": {"name": "echo", "arguments": {"text": f"hello {i}"}}})
        if response.status != 200 or b"hello" not in body:
            raise SystemExit(f"call failed: HTTP {response.status} {body[:300]!r}")
    connection.close()


def instructions_http(sluice, calls):
    """As `instructions`, of a small call over HTTP: sluice listening, in
    front of `sluice sample-server --listen` (run natively), the client in
    a session."""
    upstream_port = free_port()
    upstream = subprocess.Popen([sluice, "sample-server", "--listen", f"127.0.0.1:{upstream_port}"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write(f'[upstreams.sample]\nurl = "http://127.0.0.1:{upstream_port}/mcp"\n')
    config.close()
    totals = []
    try:
        wait_for_port(upstream_port, upstream)
        for n in calls:
            out = f"/tmp/sluice-instructions-{os.getpid()}-http-{n}.out"
            port = free_port()
            gateway = subprocess.Popen(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sluice,
                 "--log-level", "error", "--listen", f"127.0.0.1:{port}", "--config", config.name],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_port(port, gateway)
            drive_http(f"http://127.0.0.1:{port}/mcp", n)
            gateway.send_signal(signal.SIGINT)
            gateway.wait()
            with open(out) as f:
                totals.append(next(int(l.split()[1]) for l in f if l.startswith("totals:")))
            os.remove(out)
    finally:
        upstream.kill()
        upstream.wait()
        os.remove(config.name)
    return (totals[1] - totals[0]) / (calls[1] - calls[0])


def footprint(gateway, calls=1200, runs_at_least=1000):
    """The code `gateway` (a stdio MCP server's command, in front of the
    sample server) runs for `calls` small calls: (instructions run at least
    `runs_at_least` times, distinct 64-byte lines holding them)."""
    out = f"/tmp/sluice-footprint-{os.getpid()}.out"
    drive(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
           "--compress-strings=no", f"--callgrind-out-file={out}"] + gateway,
          calls, "echo", {"text": "hello"})
    runs = {}
    with open(out, errors="replace") as f:
        # Cost lines are `ADDRESS LINE COUNT`; the line after `calls=` is
        # a call's inclusive cost, not an instruction's own.
        objects, after_call = "", False
        for line in f:
            if after_call:
                after_call = False
            elif line.startswith("ob="):
                objects = line[3:].strip()
            elif line.startswith("calls="):
                after_call = True
            elif line.startswith("0x"):
                parts = line.split()
                if len(parts) >= 3:
                    key = (objects, int(parts[0], 16))
                    runs[key] = runs.get(key, 0) + int(parts[2])
    os.remove(out)
    hot = [key for key, count in runs.items() if count >= runs_at_least]
    return len(hot), len({(objects, address // 64) for objects, address in hot})


def print_footprint(label, gateway):
    instructions, lines = footprint(gateway)
    print(f"{label}: {lines:,} lines of code ({lines * 64 / 1024:,.0f} KiB, {instructions:,} "
          "instructions) run in most of 1,200 small calls")


def median(values):
    return sorted(values)[len(values) // 2]


def main():
    if sys.argv[1:2] == ["--footprint-of"]:
        sample = [os.environ.get("SLUICE", "target/release/sluice"), "sample-server"]
        return print_footprint(" ".join(sys.argv[2:]), sys.argv[2:] + sample)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    binaries = args or ["target/release/sluice"]
    record = tempfile.mkdtemp(prefix="sluice-instructions-")
    raw_server = os.path.join(HERE, "..", "..", "tests", "fixtures", "raw_server.py")
    instant = [sys.executable, os.path.abspath(raw_server), "--record", record]
    huge = {"mb": 1, "form": "json"}
    if "--time-only" not in sys.argv:
        if not shutil.which("valgrind"):
            raise SystemExit("valgrind is not installed (apt-get install valgrind), or pass --time-only")
        for sluice in binaries:
            small = instructions(sluice, [sluice, "sample-server"], (200, 1200), "echo", {"text": "hello"})
            large = instructions(sluice, instant, (2, 6), "huge", huge)
            over_http = instructions_http(sluice, (200, 1200))
            print(f"{sluice}: {small:,.0f} instructions per small call, {large / 1e6:,.1f} M per 1 MB stored result, "
                  f"{over_http:,.0f} per small call over HTTP")
            if "--footprint" in sys.argv:
                print_footprint(sluice, [sluice, "--", sluice, "sample-server"])
    rounds = 3
    direct = []
    through = {sluice: [] for sluice in binaries}
    for _ in range(rounds):
        times = drive_interleaved([instant] + [[sluice, "--"] + instant for sluice in binaries],
                                  100, "huge", huge)
        direct.append(median(times[0]))
        for sluice, own in zip(binaries, times[1:]):
            through[sluice].append(median(own))
    print("1 MB result from an instant upstream, p50 of 100 calls per round (directly and through "
          f"each binary, interleaved call by call), {rounds} rounds: directly (the whole result) "
          f"{' / '.join(f'{t * 1e3:.2f}' for t in direct)} ms")
    for sluice, times in through.items():
        print(f"  through {sluice} (stored, answered with its summary): {' / '.join(f'{t * 1e3:.2f}' for t in times)} ms")
    shutil.rmtree(record, ignore_errors=True)


if __name__ == "__main__":
    main()
