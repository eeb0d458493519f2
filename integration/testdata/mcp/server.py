#!/usr/bin/env python3
"""A small stdio MCP server for the tests: the untrusted third-party server
that agentbox hosts inside a sandbox. Standard library only. It speaks
newline-delimited JSON-RPC 2.0 on stdin and stdout (MCP's stdio transport)
and offers tools that reach for files, the network and its own process, so
the tests can see what the sandbox lets it do."""
import json
import os
import sys
import urllib.request

VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

TOOLS = [
    {"name": "read_file", "description": "Read a file.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "list_dir", "description": "List a directory.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "fetch", "description": "GET a URL (5 s timeout).",
     "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}},
    {"name": "pid", "description": "This server's process id.",
     "inputSchema": {"type": "object", "properties": {}}},
]


def call(name, args):
    if name == "read_file":
        with open(args["path"]) as f:
            return f.read()
    if name == "list_dir":
        return "\n".join(sorted(os.listdir(args["path"])))
    if name == "fetch":
        with urllib.request.urlopen(args["url"], timeout=5) as r:
            return r.read().decode()
    if name == "pid":
        return str(os.getpid())
    raise KeyError("unknown tool " + name)


def answer(msg):
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        return None  # a notification
    if method == "initialize":
        want = msg.get("params", {}).get("protocolVersion")
        return {"protocolVersion": want if want in VERSIONS else VERSIONS[1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "testdata-server", "version": "1.0"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        p = msg.get("params", {})
        try:
            return {"content": [{"type": "text", "text": call(p.get("name"), p.get("arguments") or {})}]}
        except Exception as e:  # the tool's failure is the tool's result
            return {"content": [{"type": "text", "text": "%s: %s" % (type(e).__name__, e)}], "isError": True}
    raise LookupError(method)


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    try:
        res = answer(msg)
        if res is None:
            continue
        out = {"jsonrpc": "2.0", "id": msg["id"], "result": res}
    except LookupError as e:
        out = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "method not found: %s" % e}}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
