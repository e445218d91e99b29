#!/usr/bin/env python3
"""A hand-written MCP client (no SDK) that sends exact lines and records
exact bytes.

It sends the messages of a script one by one, over stdio (it starts the
server command) or Streamable HTTP (POSTs to a URL), and writes every
message it receives, byte for byte, to the output file. After each request
it waits (at most --timeout seconds) for the answer with the same id; what
arrives meanwhile is recorded too, and server->client requests are answered
from the script's `replies` (the reply's `result` spliced in raw, under the
request's own raw id).

Script (JSON):
    {"send": ["<raw message>", ...],            exact text, one message each
     "replies": {"roots/list": "<raw result>"}} optional; other methods get
                                                 a -32601 error

Output (--out): one line per message received, the exact bytes (an SSE
event's data), then for each request not answered in time a line
`#timeout <raw id>`. Every reply the client sent goes to --out with the
prefix `#replied `.

Run:
    raw_client.py --script S.json --out OUT -- sluice -- python raw_server.py --record DIR
    raw_client.py --script S.json --out OUT --url http://127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import subprocess
import sys
import threading
import time
import urllib.parse


def raw_member(message: bytes, key: str) -> bytes | None:
    """The raw text of a top-level member of a JSON object."""
    text = message.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    i = text.index("{") + 1
    while True:
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == "}":
            return None
        name, i = decoder.raw_decode(text, i)
        while text[i] in " \t\r\n:":
            i += 1
        _, end = decoder.raw_decode(text, i)
        if name == key:
            return text[i:end].encode()
        i = end


class Output:
    def __init__(self, path: str) -> None:
        self._file = open(path, "wb")
        self._lock = threading.Lock()

    def line(self, data: bytes) -> None:
        with self._lock:
            self._file.write(data + b"\n")
            self._file.flush()


class Client:
    """What both transports share: the inbox of received messages, and the
    answers to server->client requests."""

    def __init__(self, out: Output, replies: dict[str, str]) -> None:
        self.out = out
        self.replies = replies
        self.inbox: queue.Queue[bytes] = queue.Queue()

    def received(self, message: bytes) -> None:
        self.out.line(message)
        try:
            parsed = json.loads(message.decode("utf-8", "replace"))
        except ValueError:
            self.inbox.put(message)
            return
        if isinstance(parsed, dict) and "method" in parsed and "id" in parsed:
            request_id = raw_member(message, "id")
            result = self.replies.get(parsed["method"])
            if result is None:
                reply = b'{"jsonrpc":"2.0","id":' + request_id + b',"error":{"code":-32601,"message":"not in the script"}}'
            else:
                reply = b'{"jsonrpc":"2.0","id":' + request_id + b',"result":' + result.encode() + b"}"
            self.out.line(b"#replied " + reply)
            self.reply(reply)
            return
        self.inbox.put(message)

    def reply(self, message: bytes) -> None:
        raise NotImplementedError

    def send(self, message: bytes) -> None:
        raise NotImplementedError

    def run(self, messages: list[str], timeout: float) -> None:
        for text in messages:
            message = text.encode()
            parsed = json.loads(message.decode("utf-8", "replace"))
            self.send(message)
            if "id" not in parsed or "method" not in parsed:
                continue
            wanted = parsed["id"]
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                try:
                    got = self.inbox.get(timeout=max(left, 0.001))
                except queue.Empty:
                    self.out.line(b"#timeout " + json.dumps(wanted).encode())
                    break
                try:
                    parsed_got = json.loads(got.decode("utf-8", "replace"))
                except ValueError:
                    continue
                if isinstance(parsed_got, dict) and "method" not in parsed_got and parsed_got.get("id") == wanted:
                    break


class StdioClient(Client):
    def __init__(self, out: Output, replies: dict[str, str], command: list[str]) -> None:
        super().__init__(out, replies)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.process.stdout:
            line = raw.rstrip(b"\r\n")
            if line:
                self.received(line)

    def send(self, message: bytes) -> None:
        try:
            with self._lock:
                self.process.stdin.write(message + b"\n")
                self.process.stdin.flush()
        except OSError:
            # The server is gone: say so, and let run() time out.
            self.out.line(b"#closed")

    reply = send

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def standalone_headers(message: bytes) -> dict[str, str]:
    """The headers of a request that carries its protocol version in its
    `_meta` (2026-07-28, no session): the version, and SEP-2243's
    `Mcp-Method` and `Mcp-Name` (the tool, prompt or resource named)."""
    try:
        parsed = json.loads(message)
    except ValueError:
        return {}
    params = parsed.get("params") if isinstance(parsed, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
    if not isinstance(version, str):
        return {}
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": str(parsed.get("method"))}
    name = params.get("name") or params.get("uri")
    if isinstance(name, str):
        headers["Mcp-Name"] = name
    return headers


class HttpClient(Client):
    def __init__(self, out: Output, replies: dict[str, str], url: str, accept: str) -> None:
        super().__init__(out, replies)
        self.url = urllib.parse.urlsplit(url)
        self.accept = accept
        self.session: str | None = None
        self.version: str | None = None

    def _post(self, message: bytes) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=600)
        headers = {"Content-Type": "application/json", "Accept": self.accept}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        else:
            headers.update(standalone_headers(message))
        connection.request("POST", self.url.path, body=message, headers=headers)
        return connection.getresponse()

    def send(self, message: bytes) -> None:
        parsed = json.loads(message.decode("utf-8", "replace"))
        if "id" not in parsed:
            # A notification or a response: posted before the next message.
            self._exchange(message)
            return
        # The answer streams in on its own thread, so that run() can time out.
        threading.Thread(target=self._exchange, args=(message,), daemon=True).start()
        if parsed.get("method") == "initialize":
            # Later requests need the session id: wait for it.
            for _ in range(600):
                if self.session:
                    break
                time.sleep(0.05)

    def _exchange(self, message: bytes) -> None:
        answer = self._post(message)
        if json.loads(message).get("method") == "initialize":
            self.version = "2025-11-25"
            self.session = answer.getheader("Mcp-Session-Id") or ""
            if self.session:
                threading.Thread(target=self._listen, daemon=True).start()
        kind = answer.getheader("Content-Type") or ""
        if kind.startswith("text/event-stream"):
            self._events(answer)
        else:
            body = answer.read()
            if body:
                self.received(body)
            elif answer.status >= 300:
                self.out.line(b"#http %d" % answer.status)

    def _events(self, stream: http.client.HTTPResponse) -> None:
        """Records the data of each SSE event (a priming event has none)."""
        data: list[bytes] = []
        for raw in stream:
            line = raw.rstrip(b"\r\n")
            if not line:
                if any(data):
                    self.received(b"\n".join(data))
                data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
        if any(data):
            self.received(b"\n".join(data))

    def _listen(self) -> None:
        """The session's standalone stream (GET), where what belongs to no
        request arrives."""
        connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=600)
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": self.session or ""}
        headers["MCP-Protocol-Version"] = "2025-11-25"
        connection.request("GET", self.url.path, headers=headers)
        stream = connection.getresponse()
        if stream.status == 200:
            self._events(stream)

    def reply(self, message: bytes) -> None:
        self._post(message).read()

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--url")
    parser.add_argument("--timeout", type=float, default=10)
    parser.add_argument("--accept", default="application/json, text/event-stream", help="the Accept of every POST (HTTP)")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()
    with open(args.script, encoding="utf-8") as f:
        script = json.load(f)
    out = Output(args.out)
    replies = script.get("replies", {})
    if args.url:
        client: Client = HttpClient(out, replies, args.url, args.accept)
    else:
        client = StdioClient(out, replies, args.command)
    try:
        client.run(script["send"], args.timeout)
    finally:
        client.close()


if __name__ == "__main__":
    main()
    sys.exit(0)
