"""The Python runner of the shared behaviour suite (sdk/testdata/behaviour).
One runner drives both Sandbox and AsyncSandbox: every call goes through
``call``, which awaits what is awaitable."""

import asyncio
import base64
import glob
import inspect
import json
import os
import tempfile

from agentbox import AsyncSandbox, Sandbox
from agentbox.errors import AgentboxError, error_from_code


def load_cases(directory):
    cases = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path, encoding="utf-8") as f:
            for case in json.load(f):
                cases.append(case)
    return cases


async def call(v):
    return await v if inspect.isawaitable(v) else v


def _blob(v):
    return base64.b64decode(v["b64"]) if isinstance(v, dict) else v.encode()


def _write_tree(root, tree):
    for rel, v in tree.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(_blob(v))


def _read_tree(root):
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


class Failure(AssertionError):
    pass


def check(step, key, got, want):
    if got != want:
        raise Failure(f"step {step['op']} {json.dumps({k: v for k, v in step.items() if k != 'expect'})}: "
                      f"{key} = {got!r}, want {want!r}")


async def _pty_step(sbx, step, exp):
    t = await call(sbx.pty(cmd=step.get("cmd")))
    try:
        if "text" in step:
            await call(t.write(step["text"]))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + step.get("timeout_s", 60)
        out = b""
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise Failure(f"the terminal's program did not exit within {step.get('timeout_s', 60)} s; got {out[-300:]!r}")
            chunk = await call(t.read(timeout=left))
            if not chunk:
                break
            out += chunk
        if t.exit_code is None:
            raise Failure(f"the terminal ended without an exit code; output {out[-300:]!r}")
        if "stdout_contains" in exp and exp["stdout_contains"].encode() not in out:
            raise Failure(f"terminal output {out[-300:]!r} lacks {exp['stdout_contains']!r}")
        if "exit_code" in exp:
            check(step, "exit_code", t.exit_code, exp["exit_code"])
    finally:
        await call(t.close())


async def run_step(cls, sbx, step, created, snaps):
    op, exp = step["op"], step.get("expect", {})
    if op == "exec":
        kw = {k: step[k] for k in ("env", "cwd", "user", "stdin") if k in step}
        if "timeout_s" in step:
            kw["timeout"] = step["timeout_s"]
        if step.get("stream"):
            parts = []
            kw["on_stdout"] = parts.append
            kw["on_stderr"] = lambda s: None
        r = await call(sbx.exec(step["cmd"], **kw))
        if step.get("stream"):
            check(step, "streamed stdout", "".join(parts), r.stdout)
        for k in ("stdout", "stderr", "exit_code", "timed_out", "signal"):
            if k in exp:
                check(step, k, getattr(r, k), exp[k])
        if "stdout_contains" in exp and exp["stdout_contains"] not in r.stdout:
            raise Failure(f"stdout {r.stdout[-300:]!r} lacks {exp['stdout_contains']!r}")
    elif op == "write":
        data = base64.b64decode(step["b64"]) if "b64" in step else step["text"]
        mode = int(step["mode"], 8) if "mode" in step else None
        info = await call(sbx.files.write(step["path"], data, mode=mode))
        for k in ("size", "mode"):
            if k in exp:
                check(step, k, getattr(info, k), exp[k])
    elif op == "read":
        b = await call(sbx.files.read(step["path"]))
        if "text" in exp:
            check(step, "text", b.decode(), exp["text"])
        if "b64" in exp:
            check(step, "bytes", b, base64.b64decode(exp["b64"]))
    elif op == "stat":
        info = await call(sbx.files.stat(step["path"]))
        for k in ("type", "size", "mode"):
            if k in exp:
                check(step, k, getattr(info, k), exp[k])
    elif op == "exists":
        check(step, "exists", await call(sbx.files.exists(step["path"])), exp["value"])
    elif op == "list":
        entries = await call(sbx.files.list(step["path"], depth=step.get("depth", 1)))
        if "paths" in exp:
            check(step, "paths", sorted(e.path for e in entries), exp["paths"])
    elif op == "mkdir":
        info = await call(sbx.files.mkdir(step["path"]))
        if "type" in exp:
            check(step, "type", info.type, exp["type"])
    elif op == "remove":
        await call(sbx.files.remove(step["path"], recursive=step.get("recursive", False)))
    elif op == "rename":
        await call(sbx.files.rename(step["from"], step["to"]))
    elif op == "upload_tree":
        with tempfile.TemporaryDirectory() as d:
            _write_tree(d, step["tree"])
            await call(sbx.upload(d, step["remote"]))
    elif op == "download_tree":
        with tempfile.TemporaryDirectory() as d:
            dest = os.path.join(d, "out")
            await call(sbx.download(step["remote"], dest))
            want = {k: _blob(v) for k, v in exp["tree"].items()}
            check(step, "tree", _read_tree(dest), want)
    elif op == "set_ttl":
        info = await call(sbx.set_ttl(step["seconds"]))
        if "has_expiry" in exp:
            check(step, "has_expiry", info.expires_at is not None, exp["has_expiry"])
    elif op == "info":
        info = await call(sbx.info())
        for k in ("state", "template"):
            if k in exp:
                check(step, k, getattr(info, k), exp[k])
    elif op == "destroy":
        await call(sbx.destroy())
    elif op == "connect":
        s = await call(cls.connect(step.get("id") or sbx.id))
        await call(s.close())
    elif op == "create":
        args = dict(step["args"])
        s = await call(cls.create(args.pop("template", None), ttl_seconds=60, **args))
        created.append(s)
    elif op == "start":
        await call(sbx.start(step["cmd"], tag=step.get("tag")))
    elif op in ("wait", "output", "stdin", "kill"):
        p = await call(sbx.process(step["ref"]))
        if op == "wait":
            info = await call(p.wait(timeout=step.get("timeout_s")))
            if "exit_code" in exp:
                check(step, "exit_code", info.exit_code, exp["exit_code"])
        elif op == "output":
            out = await call(p.output())
            for k in ("stdout", "stderr"):
                if k in exp:
                    check(step, k, getattr(out, k), exp[k])
        elif op == "stdin":
            await call(p.send_stdin(step["text"], eof=step.get("eof", False)))
        else:
            await call(p.kill())
    elif op in ("pause", "resume"):
        info = await call(getattr(sbx, op)())
        if "state" in exp:
            check(step, "state", info.state, exp["state"])
    elif op == "fork":
        if step["count"] < 1:
            # Both SDKs leave the check to the daemon's answer shape; the
            # Python SDK refuses it before sending.
            await call(sbx.fork(count=step["count"]))
        kids = await call(sbx.fork(count=step["count"]))
        try:
            check(step, "count", len(kids), exp["count"])
            for k in kids:
                check(step, "text", (await call(k.files.read(step["path"]))).decode(), exp["text"])
        finally:
            for k in kids:
                await call(k.destroy())
                await call(k.close())
    elif op == "pty":
        await _pty_step(sbx, step, exp)
    elif op == "snapshot":
        snaps[step["tag"]] = (await call(sbx.snapshot())).id
    elif op == "from_snapshot":
        s = await call(cls.create(snapshot=snaps[step["ref"]], ttl_seconds=120,
                                  metadata={"suite": "behaviour"}))
        try:
            check(step, "text", (await call(s.files.read(step["path"]))).decode(), exp["text"])
        finally:
            await call(s.destroy())
            await call(s.close())
    elif op == "run_code":
        timeout = step.get("timeout_s")
        ex = await call(sbx.run_code(step["code"], language=step.get("language"), context=step.get("context"),
                                     env=step.get("env"), timeout=timeout))
        got = {"text": ex.text or "", "stdout": "".join(ex.logs.stdout), "status": ex.status,
               "restarted": ex.restarted, "error_name": ex.error.name if ex.error else "",
               "formats": ex.results[0].formats() if ex.results else []}
        for k, v in got.items():
            if k in exp:
                check(step, k, v, exp[k])
    elif op == "create_code_context":
        c = await call(sbx.create_code_context(language=step.get("language") or "python", cwd=step.get("cwd"),
                                               id=step.get("id")))
        if "state" in exp:
            check(step, "state", c.state, exp["state"])
    elif op == "remove_code_context":
        await call(sbx.remove_code_context(step["id"]))
    else:
        raise Failure(f"unknown op {op!r} in the behaviour suite")


async def run_case(cls, case):
    """Run one case with cls (Sandbox or AsyncSandbox)."""
    sbx = None
    created = []
    snaps = {}  # snapshot step tag -> id
    if not case.get("no_sandbox"):
        sbx = await call(cls.create(case.get("template", "base"), ttl_seconds=300,
                                    metadata={"suite": "behaviour"}))
    try:
        for step in case["steps"]:
            want = step.get("expect", {}).get("error")
            try:
                await run_step(cls, sbx, step, created, snaps)
            except AgentboxError as e:
                if want is None:
                    raise Failure(f"step {step['op']} {step}: unexpected {type(e).__name__}: {e}") from e
                cls_want = type(error_from_code(want, ""))
                if not isinstance(e, cls_want):
                    raise Failure(f"step {step}: raised {type(e).__name__} ({e.code}: {e}), "
                                  f"want {cls_want.__name__} ({want})") from e
                continue
            if want is not None:
                raise Failure(f"step {step}: succeeded, want error {want}")
    finally:
        for s in created + ([sbx] if sbx is not None else []):
            await call(s.destroy())
            await call(s.close())


__all__ = ["load_cases", "run_case", "Sandbox", "AsyncSandbox"]
