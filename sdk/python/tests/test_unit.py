"""Tests that need no daemon: configuration, error classes, parsing."""

import io
import os
import socket
import tarfile
import tempfile

import pytest

from agentbox import _archive, _calls, _config
from agentbox._common import StreamDecoder, command_fields, exec_body, signal_name
from agentbox.errors import (AgentboxError, ConflictError, InternalError, InvalidArgumentError,
                             NotFoundError, NotSupportedError, ResourceExhaustedError, TimeoutError, UnauthorizedError,
                             UnavailableError, error_from_code, error_from_status)
from agentbox.models import ExecResult, parse_time


@pytest.mark.parametrize("code,cls", [
    ("not_found", NotFoundError), ("invalid_argument", InvalidArgumentError),
    ("unauthenticated", UnauthorizedError), ("failed_precondition", ConflictError),
    ("already_exists", ConflictError), ("resource_exhausted", ResourceExhaustedError),
    ("deadline_exceeded", TimeoutError), ("unavailable", UnavailableError), ("internal", InternalError),
    ("something_new", InternalError),
])
def test_error_from_code(code, cls):
    e = error_from_code(code, "msg", 400)
    assert type(e) is cls and e.code == code and e.message == "msg" and str(e) == "msg" and e.status == 400
    assert isinstance(e, AgentboxError)


def test_errors_catchable_as_builtins():
    import builtins
    assert isinstance(error_from_code("deadline_exceeded", ""), builtins.TimeoutError)
    assert isinstance(error_from_code("unavailable", ""), ConnectionError)
    assert isinstance(error_from_code("invalid_argument", ""), ValueError)


def test_error_from_status():
    assert isinstance(error_from_status(404, "x"), NotFoundError)
    assert isinstance(error_from_status(502, "x"), UnavailableError)
    assert isinstance(error_from_status(418, "x"), InternalError)


@pytest.mark.parametrize("host,base,sock", [
    ("unix:///run/a.sock", "http://agentbox", "/run/a.sock"),
    ("http://10.0.0.1:7423", "http://10.0.0.1:7423", None),
    ("https://box.example.com/", "https://box.example.com", None),
    ("tcp://1.2.3.4:5", "http://1.2.3.4:5", None),
    ("localhost:7423", "http://localhost:7423", None),
])
def test_parse_host(host, base, sock):
    assert _config.parse_host(host) == (base, sock)


@pytest.mark.parametrize("host", ["unix://relative.sock", "ftp://x", "http://"])
def test_parse_host_rejects(host):
    with pytest.raises(InvalidArgumentError):
        _config.parse_host(host)


def test_resolve_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTBOX_HOST", "http://127.0.0.1:9")
    monkeypatch.setenv("AGENTBOX_API_KEY", "envkey")
    c = _config.resolve()
    assert (c.base_url, c.api_key, c.socket) == ("http://127.0.0.1:9", "envkey", None)
    c = _config.resolve(api_key="argkey", base_url="unix:///x.sock")
    assert (c.base_url, c.api_key, c.socket) == ("http://agentbox", "argkey", "/x.sock")


def test_resolve_empty_key_env_is_an_error(monkeypatch, tmp_path):
    key = tmp_path / "admin.key"
    key.write_text("sekrit\n")
    monkeypatch.setenv("AGENTBOX_API_KEY", "")
    with pytest.raises(InvalidArgumentError, match="AGENTBOX_API_KEY is set but empty"):
        _config.resolve(base_url="http://127.0.0.1:9", admin_key_path=str(key))
    # An explicit api_key still wins over the empty variable.
    assert _config.resolve(api_key="k", base_url="http://127.0.0.1:9").api_key == "k"


def test_resolve_root_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTBOX_HOST", raising=False)
    monkeypatch.delenv("AGENTBOX_API_KEY", raising=False)
    sock = str(tmp_path / "d.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(sock)
    key = tmp_path / "admin.key"
    key.write_text("sekrit\n")
    try:
        c = _config.resolve(socket_path=sock, admin_key_path=str(key))
    finally:
        s.close()
    if os.geteuid() == 0:
        assert (c.socket, c.api_key) == (sock, "sekrit")
    else:
        assert (c.base_url, c.api_key) == ("http://127.0.0.1:7423", "")
    # The admin key never goes to a remote daemon.
    c = _config.resolve(base_url="http://10.1.2.3:7423", admin_key_path=str(key))
    assert c.api_key == ""


def test_command_fields():
    assert command_fields("echo hi") == {"shell": "echo hi"}
    assert command_fields(["echo", "hi"]) == {"cmd": ["echo", "hi"]}
    for bad in ("", [], [1]):
        with pytest.raises(InvalidArgumentError):
            command_fields(bad)


def test_exec_body():
    b = exec_body("x", {"A": "1"}, "/tmp", "nobody", 1.5, "in")
    assert b == {"shell": "x", "env": {"A": "1"}, "cwd": "/tmp", "user": "nobody", "timeout_ms": 1500,
                 "stdin": "aW4="}
    with pytest.raises(InvalidArgumentError):
        exec_body("x", None, None, None, 0, None)


def test_signal_name():
    import signal
    assert signal_name("int") == "SIGINT"
    assert signal_name("SIGTERM") == "SIGTERM"
    assert signal_name(signal.SIGKILL) == "SIGKILL"
    assert signal_name(9) == 9


def test_stream_decoder_splits_utf8_and_keeps_order():
    got = []
    d = StreamDecoder(lambda s: got.append(("out", s)), lambda s: got.append(("err", s)))
    euro = "€".encode()  # three bytes, split across two events
    import base64
    import json
    events = [
        {"type": "start", "pid": 3},
        {"type": "stdout", "data": base64.b64encode(b"a" + euro[:1]).decode()},
        {"type": "stderr", "data": base64.b64encode(b"E").decode()},
        {"type": "stdout", "data": base64.b64encode(euro[1:] + b"b").decode()},
        {"type": "exit", "exit_code": 2, "duration_ms": 1.0},
    ]
    raw = "".join(json.dumps(e) + "\n" for e in events).encode()
    for i in range(0, len(raw), 7):  # arbitrary chunking of the NDJSON
        d.feed(raw[i:i + 7])
    r = d.finish()
    assert got == [("out", "a"), ("err", "E"), ("out", "€b")]
    assert (r.stdout, r.stderr, r.exit_code) == ("a€b", "E", 2)


def test_stream_decoder_error_event():
    d = StreamDecoder(None, None)
    with pytest.raises(NotFoundError):
        d.feed(b'{"type":"error","error":{"code":"not_found","message":"gone"}}\n')
    with pytest.raises(UnavailableError):
        StreamDecoder(None, None).finish()


def test_exec_result_base64():
    r = ExecResult.from_dict({"stdout": "/w==", "stderr": "", "encoding": "base64", "exit_code": 0})
    assert r.stdout_bytes == b"\xff" and r.stdout == "\ufffd" and r.ok


def test_parse_time_nanoseconds():
    t = parse_time("2026-01-02T03:04:05.123456789Z")
    assert (t.year, t.microsecond, t.utcoffset().total_seconds()) == (2026, 123456, 0)


def test_extract_refuses_escape(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        link = tarfile.TarInfo("evil")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tf.addfile(link)
        data = b"pwned"
        f = tarfile.TarInfo("evil/passwd")
        f.size = len(data)
        tf.addfile(f, io.BytesIO(data))
    buf.seek(0)
    with pytest.raises(InvalidArgumentError):
        _archive.extract(buf, str(tmp_path / "out"))
    assert os.path.islink(tmp_path / "out" / "evil")
    buf2 = io.BytesIO()
    with tarfile.open(fileobj=buf2, mode="w") as tf:
        f = tarfile.TarInfo("../up.txt")
        tf.addfile(f, io.BytesIO(b""))
    buf2.seek(0)
    with pytest.raises(InvalidArgumentError):
        _archive.extract(buf2, str(tmp_path / "out2"))
    assert not (tmp_path / "up.txt").exists()


def test_tar_dir_round_trip(tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.bin").write_bytes(bytes(range(256)))
    (src / "top.txt").write_text("top")
    os.symlink("top.txt", src / "ln")
    f = _archive.tar_dir(str(src))
    _archive.extract(f, str(tmp_path / "dst"))
    assert (tmp_path / "dst" / "a" / "b" / "f.bin").read_bytes() == bytes(range(256))
    assert os.readlink(tmp_path / "dst" / "ln") == "top.txt"


@pytest.mark.parametrize("network,port,want", [
    ({"preview_domain": "localhost:7423", "preview_token": "t/k"}, 80, "http://80-sb1.localhost:7423/?agentbox_token=t%2Fk"),
    ({"preview_domain": "p.example", "preview": "public", "preview_token": "tk"}, 3000, "http://3000-sb1.p.example/"),
    ({"preview_domain": "p.example"}, 65535, "http://65535-sb1.p.example/"),
])
def test_preview_url(network, port, want):
    from agentbox._common import preview_url
    assert preview_url("sb1", network, port) == want


@pytest.mark.parametrize("network,port,err", [
    ({"preview_domain": "p.example"}, 0, InvalidArgumentError),
    ({"preview_domain": "p.example"}, 65536, InvalidArgumentError),
    ({"preview_domain": "p.example"}, True, InvalidArgumentError),
    ({}, 80, NotSupportedError),
])
def test_preview_url_refused(network, port, err):
    from agentbox._common import preview_url
    with pytest.raises(err):
        preview_url("sb1", network, port)


def test_pool_status_from_dict():
    from agentbox import PoolStatus
    p = PoolStatus.from_dict({"template": "base", "isolation": "container", "size": 4, "ready": 3,
                              "resources": {"cpu": 1, "memory_mb": 512, "disk_mb": 1024, "pids": 512},
                              "egress": "internet", "served": 7, "misses": 1, "booted": 10, "failures": 0})
    assert (p.template, p.size, p.ready, p.egress, p.served, p.misses, p.booted) == ("base", 4, 3, "internet", 7, 1, 10)
    assert p.resources.memory_mb == 512 and p.last_error == ""


@pytest.mark.parametrize("sync_name,async_name", [
    ("Sandbox", "AsyncSandbox"), ("Files", "AsyncFiles"), ("Process", "AsyncProcess"), ("Client", "AsyncClient"),
])
def test_async_surface_matches_sync(sync_name, async_name):
    # Both classes send the same _calls descriptions; their public methods
    # must keep the same names and parameters.
    import inspect
    import agentbox
    s, a = getattr(agentbox, sync_name), getattr(agentbox, async_name)

    def methods(cls):
        return {n: getattr(cls, n) for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}
    sm, am = methods(s), methods(a)
    assert sorted(sm) == sorted(am)
    for name, fn in sm.items():
        sp = [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]
        ap = [(p.name, p.kind, p.default) for p in inspect.signature(am[name]).parameters.values()]
        assert sp == ap, name
        # AsyncSandbox.create returns an awaitable that also works in async with.
        is_create = (async_name, name) == ("AsyncSandbox", "create")
        assert inspect.iscoroutinefunction(am[name]) is not is_create, name


def test_calls_describe_requests():
    from agentbox import _calls as calls
    from agentbox.models import SandboxInfo
    c = calls.set_ttl("sb 1", None)
    assert (c.method, c.path, c.json_body) == ("PATCH", "/v1/sandboxes/sb%201", {"ttl_seconds": -1})
    assert calls.set_ttl("sb", 30).json_body == {"ttl_seconds": 30}
    c = calls.fork("sb", 2, True)
    assert c.json_body == {"count": 2, "memory": True}
    assert [type(i) for i in c.decode({"sandboxes": [{"id": "a"}, {"id": "b"}]})] == [SandboxInfo, SandboxInfo]
    assert calls.file_read("sb", "/a").raw and calls.destroy("sb").decode is None
    assert calls.proc_wait("sb", 7, 0.5).params == {"timeout_ms": "500"}
    assert calls.pools().decode({}) == []
    made = []
    with pytest.raises(InvalidArgumentError, match="path inside the sandbox"):
        calls.file_write("sb", "", b"x", None, None, made.append)
    assert made == []  # the path is checked before the content is made
    c = calls.file_write("sb", "/a", b"x", 0o100755, "u", lambda d: d)
    assert c.params == {"path": "/a", "mode": "0755", "user": "u"} and c.content == b"x"
    for bad in (lambda: calls.fork("sb", 0, False), lambda: calls.file_list("sb", ".", 0),
                lambda: calls.template(""), lambda: calls.file_rename("sb", "a", ""), lambda: calls.info("")):
        with pytest.raises(InvalidArgumentError):
            bad()


@pytest.mark.parametrize("mode,want", [(0o600, "0600"), ("0600", "0600"), ("600", "0600"), ("0o755", "0755"), (None, None)])
def test_file_mode_int_or_octal_string(mode, want):
    assert _calls.file_mode(mode) == want


@pytest.mark.parametrize("mode", ["rw-r--r--", "0999", "", "77777", 1.5, True])
def test_file_mode_rejects(mode):
    with pytest.raises(InvalidArgumentError, match="octal string"):
        _calls.file_mode(mode)


def test_sandbox_info_time_left():
    from datetime import datetime, timedelta, timezone
    from agentbox.models import SandboxInfo
    soon = (datetime.now(timezone.utc) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    info = SandboxInfo.from_dict({"id": "x", "state": "running", "expires_at": soon})
    assert 200 < info.time_left <= 300
    assert SandboxInfo.from_dict({"id": "x", "state": "running"}).time_left is None
    past = SandboxInfo.from_dict({"id": "x", "state": "running", "expires_at": "2020-01-01T00:00:00Z"})
    assert past.time_left == 0.0


def test_one_pool_per_configuration():
    """Every Sandbox of one configuration shares one httpx client (making
    one costs more than a create); another key, another loop or a closed
    Sandbox's close() does not disturb it (issue 22)."""
    import asyncio

    from agentbox._config import Config
    from agentbox._http import AsyncHTTP, SyncHTTP

    cfg = Config(base_url="http://127.0.0.1:9", socket=None, host="127.0.0.1:9", api_key="k1")
    a, b = SyncHTTP(cfg), SyncHTTP(cfg)
    assert a.client is b.client
    a.close()
    assert not b.client.is_closed
    other = SyncHTTP(Config(base_url="http://127.0.0.1:9", socket=None, host="127.0.0.1:9", api_key="k2"))
    assert other.client is not a.client
    assert SyncHTTP(cfg, timeout=5.0).client is not a.client

    async def pair():
        x, y = AsyncHTTP(cfg), AsyncHTTP(cfg)
        await x.close()
        assert x.client is y.client and not y.client.is_closed
        return x.client

    first, second = asyncio.run(pair()), asyncio.run(pair())
    assert first is not second  # each loop its own


def test_registry_and_fleet_calls():
    from agentbox import FleetNode, NodeStatus, PushResult, Snapshot, Template
    from agentbox import _calls as calls
    c = calls.push_template("my app", "127.0.0.1:5000/agentbox/app:1")
    assert (c.method, c.path, c.json_body) == ("POST", "/v1/templates/my%20app/push", {"ref": "127.0.0.1:5000/agentbox/app:1"})
    assert c.decode({"ref": "r", "digest": "sha256:ab"}) == PushResult(ref="r", digest="sha256:ab")
    c = calls.pull_template("127.0.0.1:5000/agentbox/app:1", None)
    assert (c.method, c.path, c.json_body) == ("POST", "/v1/templates/pull", {"ref": "127.0.0.1:5000/agentbox/app:1"})
    assert calls.pull_template("h/r:1", "x").json_body == {"ref": "h/r:1", "name": "x"}
    assert isinstance(c.decode({"name": "app", "version": "2"}), Template)
    c = calls.push_snapshot("n2a/x", "h/s:1")
    assert (c.path, c.json_body) == ("/v1/snapshots/n2a%2Fx/push", {"ref": "h/s:1"})
    c = calls.pull_snapshot("h/s:1", "s1")
    assert (c.path, c.json_body) == ("/v1/snapshots/pull", {"ref": "h/s:1", "name": "s1"})
    assert isinstance(c.decode({"id": "n2aabc", "name": "s1"}), Snapshot)
    for bad in (lambda: calls.push_template("", "h/r"), lambda: calls.push_template("t", ""),
                lambda: calls.pull_template("", None), lambda: calls.push_snapshot("", "h/r"),
                lambda: calls.pull_snapshot("", None)):
        with pytest.raises(InvalidArgumentError):
            bad()
    assert (calls.fleet_nodes().path, calls.node_status().path) == ("/v1/fleet/nodes", "/v1/node")
    nodes = calls.fleet_nodes().decode({"nodes": [
        {"id": "n2a", "url": "http://192.0.2.11:7423", "available": True, "in_flight": 2,
         "last_poll": "2026-01-02T03:04:05.123456789Z",
         "status": {"node_id": "n2a", "version": "v1", "tiers": [{"name": "container", "available": True}],
                    "sandboxes": 3, "cpus": 2, "load1": 0.5, "memory_total_mb": 24000,
                    "memory_available_mb": 20000, "templates": ["base"]}},
        {"id": "n3b", "url": "http://192.0.2.12:7423", "last_error": "connection refused"}]})
    assert [type(n) for n in nodes] == [FleetNode, FleetNode]
    a, b = nodes
    assert a.available and a.in_flight == 2 and a.last_poll is not None and a.last_poll.year == 2026
    assert isinstance(a.status, NodeStatus) and a.status.sandboxes == 3 and a.status.templates == ["base"]
    assert a.status.tiers[0]["name"] == "container" and a.status.memory_available_mb == 20000
    assert not b.available and b.status is None and b.last_error == "connection refused"
    assert calls.fleet_nodes().decode({}) == []
    assert NodeStatus.from_dict({}).node_id == ""
