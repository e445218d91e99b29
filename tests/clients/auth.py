#!/usr/bin/env python3
"""Bearer tokens for sluice's [auth], and a Python MCP SDK 2.x client that presents them.

    auth.py sign --dir DIR --issuer ISS --audience AUD [--subject SUB]
    auth.py call --url URL --mode auto|legacy --tokens JSON [--text TEXT]

`sign` makes an RSA (2048) key "rsa", an EC P-256 key "ec", a key "rotated" and a key
"other", writes DIR/jwks.json (rsa, ec), DIR/jwks-rotated.json (rsa, ec, rotated) and
prints one JSON object of named tokens (pyjwt), all with exp in an hour unless said:
  rs256, es256             good tokens (RS256 by "rsa", ES256 by "ec"), sub = SUBJECT
  rotated                  RS256 by "rotated" (only in jwks-rotated.json)
  expired                  RS256, exp two hours ago
  wrong_audience           RS256, aud "someone-else"
  wrong_issuer             RS256, iss "https://evil.example"
  unknown_kid              RS256 by "other", kid "other" (in no JWKS)
  bad_signature            RS256 claims "rsa" as kid, signed by "other"
  hs256_with_public_key    HS256 keyed with the public PEM of "rsa", kid "rsa"
  alg_none                 alg "none", no signature
  no_subject               RS256 without `sub`

`call` connects once per token, in order, with an httpx2 client whose headers carry
`Authorization: Bearer TOKEN` (given to the SDK's streamable HTTP transport), calls the tool
`echo` {"text": TEXT} and prints a JSON list: {"name", "ok": true, "protocol_version", "text"}
or {"name", "ok": false, "error": "<exception type: message>"}. TOKENS is a JSON list of
[name, token] pairs; a null token sends no Authorization header.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import pathlib
import sys
import time
import warnings

import anyio
import httpx2
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwk(public_key, kid: str, alg: str) -> dict:  # noqa: ANN001
    if isinstance(public_key, rsa.RSAPublicKey):
        key = jwt.algorithms.RSAAlgorithm.to_jwk(public_key, as_dict=True)
    else:
        key = jwt.algorithms.ECAlgorithm.to_jwk(public_key, as_dict=True)
    key.update(kid=kid, use="sig", alg=alg)
    return key


def sign(a: argparse.Namespace) -> dict:
    out = pathlib.Path(a.dir)
    out.mkdir(parents=True, exist_ok=True)
    keys = {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec": ec.generate_private_key(ec.SECP256R1()),
        "rotated": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "other": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    }
    algs = {"rsa": "RS256", "ec": "ES256", "rotated": "RS256", "other": "RS256"}
    jwks = [jwk(keys[k].public_key(), k, algs[k]) for k in ("rsa", "ec")]
    (out / "jwks.json").write_text(json.dumps({"keys": jwks}))
    rotated = jwks + [jwk(keys["rotated"].public_key(), "rotated", "RS256")]
    (out / "jwks-rotated.json").write_text(json.dumps({"keys": rotated}))

    now = int(time.time())
    claims = {"iss": a.issuer, "aud": a.audience, "sub": a.subject, "iat": now, "exp": now + 3600}

    def token(key: str, kid: str | None = None, **changes) -> str:  # noqa: ANN003
        body = {**claims, **changes}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, keys[key], algorithm=algs[key], headers={"kid": kid or key})

    def unsigned(header: dict, secret: bytes | None) -> str:
        message = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        mac = hmac.new(secret, message.encode(), hashlib.sha256).digest() if secret else b""
        return f"{message}.{b64(mac)}"

    public_pem = keys["rsa"].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return {
        "rs256": token("rsa"),
        "es256": token("ec"),
        "rotated": token("rotated"),
        "expired": token("rsa", exp=now - 7200, iat=now - 10800),
        "wrong_audience": token("rsa", aud="someone-else"),
        "wrong_issuer": token("rsa", iss="https://evil.example"),
        "unknown_kid": token("other"),
        "bad_signature": token("other", kid="rsa"),
        "hs256_with_public_key": unsigned({"alg": "HS256", "typ": "JWT", "kid": "rsa"}, public_pem),
        "alg_none": unsigned({"alg": "none", "typ": "JWT", "kid": "rsa"}, None),
        "no_subject": token("rsa", sub=None),
    }


async def call_one(url: str, mode: str, token: str | None, text: str) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        client = Client(streamable_http_client(url, http_client=http), mode=mode, cache=None)
        with anyio.fail_after(60):
            async with client as c:
                result = await c.call_tool("echo", {"text": text})
                dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                return {"protocol_version": c.protocol_version, "text": dumped["content"][0]["text"]}


async def call(a: argparse.Namespace) -> list:
    results = []
    for name, token in json.loads(a.tokens):
        try:
            answer = await call_one(a.url, a.mode, token, a.text)
            results.append({"name": name, "ok": True, **answer})
        except BaseException as e:  # noqa: BLE001 - an exception group wraps the HTTP error
            results.append({"name": name, "ok": False, "error": describe(e)})
    return results


def describe(e: BaseException) -> str:
    """The innermost exceptions of a group, as "Type: message"."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sign")
    s.add_argument("--dir", required=True)
    s.add_argument("--issuer", required=True)
    s.add_argument("--audience", required=True)
    s.add_argument("--subject", default="alice")
    c = sub.add_parser("call")
    c.add_argument("--url", required=True)
    c.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    c.add_argument("--tokens", required=True)
    c.add_argument("--text", default="hello through auth")
    a = parser.parse_args()
    if a.command == "sign":
        print(json.dumps(sign(a)))
    else:
        print(json.dumps(anyio.run(call, a)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
