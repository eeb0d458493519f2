"""Every method of the blocking SDK that the daemon serves today, against a
real daemon."""

import io
import os
import time
import uuid

import pytest

from agentbox import Client, Sandbox
from agentbox.errors import (AgentboxError, ConflictError, InvalidArgumentError, NotFoundError,
                             NotSupportedError, UnauthorizedError, UnavailableError)
from conftest import TEMPLATE


def test_snippet_and_context_manager_destroys():
    with Sandbox.create(template=TEMPLATE, ttl_seconds=300) as sbx:
        r = sbx.exec("python3 -c 'print(sum(range(101)))'")
        assert (r.stdout, r.stderr, r.exit_code) == ("5050\n", "", 0)
        assert r.ok and r.duration_ms > 0
        sid = sbx.id
    with Client() as c:
        pass
    with pytest.raises(NotFoundError):
        Sandbox.connect(sid)


def test_context_manager_destroys_on_exception():
    with pytest.raises(RuntimeError):
        with Sandbox.create(template=TEMPLATE) as sbx:
            sid = sbx.id
            raise RuntimeError("boom")
    with pytest.raises(NotFoundError):
        Sandbox.connect(sid)


def test_connect_list_info_ttl_destroy():
    label = uuid.uuid4().hex
    sbx = Sandbox.create(template=TEMPLATE, ttl_seconds=300, metadata={"label": label},
                         env={"FROM_CREATE": "yes"}, memory_mb=256, cpu=0.5)
    try:
        info = sbx.info()
        assert info.id == sbx.id and info.state == "running" and info.template == TEMPLATE
        assert info.metadata == {"label": label} and info.resources.memory_mb == 256
        assert info.resources.cpu == 0.5 and info.expires_at is not None
        assert sbx.exec("echo $FROM_CREATE").stdout == "yes\n"
        ids = [s.id for s in Sandbox.list(metadata={"label": label})]
        assert ids == [sbx.id]
        assert Sandbox.list(metadata={"label": "no-" + label}) == []
        before = info.expires_at
        after = sbx.set_ttl(3600).expires_at
        assert after > before
        again = Sandbox.connect(sbx.id)
        assert again.exec("true").exit_code == 0
        again.close()
    finally:
        sbx.destroy()
        sbx.destroy()  # idempotent
        sbx.close()
    assert [s.state for s in Sandbox.list(metadata={"label": label})] in ([], ["destroyed"])


def test_client_health_and_templates():
    with Client() as c:
        h = c.health()
        assert h.status == "ok" and "container" in h.drivers
        names = [t.name for t in c.templates()]
        assert TEMPLATE in names
        assert c.template(TEMPLATE).name == TEMPLATE
        with pytest.raises(NotFoundError):
            c.template("no-such-template")


def test_exec_options(shared_sbx):
    s = shared_sbx
    assert s.exec(["printf", "%s|", "a b", "$X"]).stdout == "a b|$X|"
    assert s.exec("echo $A-$B", env={"A": "1", "B": "2"}).stdout == "1-2\n"
    assert s.exec("pwd", cwd="/usr").stdout == "/usr\n"
    assert s.exec("whoami", user="nobody").stdout == "nobody\n"
    assert s.exec("cat", stdin=b"\x00\x01bin").stdout_bytes == b"\x00\x01bin"
    assert s.exec("cat", stdin="text").stdout == "text"
    r = s.exec("echo err >&2; exit 7")
    assert (r.stderr, r.exit_code, r.ok) == ("err\n", 7, False)


def test_exec_non_utf8_output(shared_sbx):
    r = shared_sbx.exec("printf '\\377\\376ok'")
    assert r.stdout_bytes == b"\xff\xfeok" and r.stdout.endswith("ok")


def test_exec_timeout_is_a_result(shared_sbx):
    t = time.monotonic()
    r = shared_sbx.exec("echo before; sleep 30", timeout=1)
    assert time.monotonic() - t < 15
    assert r.timed_out and r.exit_code == 137 and r.signal == "SIGKILL" and r.stdout == "before\n"
    assert not r.ok


def test_exec_callbacks_stream_in_order(shared_sbx):
    events = []
    t0 = time.monotonic()
    r = shared_sbx.exec(
        "for i in 1 2 3; do echo out$i; sleep 0.3; echo err$i >&2; sleep 0.3; done",
        on_stdout=lambda s: events.append(("out", s, time.monotonic() - t0)),
        on_stderr=lambda s: events.append(("err", s, time.monotonic() - t0)))
    assert r.exit_code == 0
    assert "".join(s for k, s, _ in events if k == "out") == r.stdout == "out1\nout2\nout3\n"
    assert "".join(s for k, s, _ in events if k == "err") == r.stderr == "err1\nerr2\nerr3\n"
    assert [k for k, _, _ in events] == ["out", "err"] * 3
    # Streamed: the first chunk came long before the command ended.
    assert events[0][2] < events[-1][2] - 1.0


def test_exec_callbacks_with_stdin_timeout_and_unicode(shared_sbx):
    got = []
    r = shared_sbx.exec("cat; echo ünïcödé €; sleep 30", stdin="piped\n", timeout=1,
                        on_stdout=got.append)
    assert "".join(got) == r.stdout == "piped\nünïcödé €\n"
    assert r.timed_out and r.exit_code == 137


def test_files_round_trip(shared_sbx):
    f = shared_sbx.files
    blob = os.urandom(300_000) + bytes(range(256))
    info = f.write("/tmp/t/blob.bin", blob)
    assert info.size == len(blob) and info.type == "file" and info.is_file
    assert f.read("/tmp/t/blob.bin") == blob
    assert f.write("/tmp/t/text.txt", "ünïcödé\n").size == len("ünïcödé\n".encode())
    assert f.read_text("/tmp/t/text.txt") == "ünïcödé\n"
    f.write("/tmp/t/fromfile.bin", io.BytesIO(blob))
    assert f.read("/tmp/t/fromfile.bin") == blob
    out = io.BytesIO()
    assert f.read_to("/tmp/t/blob.bin", out) == len(blob) and out.getvalue() == blob
    assert f.write("/tmp/t/x.sh", "#!/bin/sh\necho x\n", mode=0o750).mode == "0750"
    assert shared_sbx.exec("/tmp/t/x.sh").stdout == "x\n"
    assert f.write("/tmp/t/empty", b"").size == 0 and f.read("/tmp/t/empty") == b""


def test_files_ops(shared_sbx):
    f = shared_sbx.files
    d = "/tmp/ops-" + uuid.uuid4().hex[:8]
    assert f.mkdir(d + "/x/y", mode=0o700).mode == "0700"
    f.write(d + "/a.txt", "a")
    shared_sbx.exec(f"ln -s a.txt {d}/link")
    names = sorted(e.name for e in f.list(d))
    assert names == ["a.txt", "link", "x"]
    deep = sorted(e.path for e in f.list(d, depth=3))
    assert deep == [d + "/a.txt", d + "/link", d + "/x", d + "/x/y"]
    e = {x.name: x for x in f.list(d)}
    assert e["x"].is_dir and e["link"].type == "symlink" and e["link"].target == "a.txt"
    assert e["a.txt"].size == 1 and e["a.txt"].mtime is not None
    st = f.stat(d + "/a.txt")
    assert (st.name, st.path, st.type, st.size, st.mode) == ("a.txt", d + "/a.txt", "file", 1, "0644")
    assert f.exists(d + "/a.txt") and not f.exists(d + "/b.txt")
    f.rename(d + "/a.txt", d + "/x/b.txt")
    assert f.read_text(d + "/x/b.txt") == "a" and not f.exists(d + "/a.txt")
    f.remove(d + "/link")
    with pytest.raises(ConflictError):
        f.remove(d + "/x")
    f.remove(d, recursive=True)
    assert not f.exists(d)


def test_files_typed_errors(shared_sbx):
    f = shared_sbx.files
    with pytest.raises(NotFoundError) as ei:
        f.read("/no/such")
    assert ei.value.code == "not_found" and "/no/such" in ei.value.message and ei.value.status == 404
    with pytest.raises(NotFoundError):
        f.stat("/no/such")
    with pytest.raises(NotFoundError):
        f.list("/no/such")
    with pytest.raises(ConflictError):
        f.read("/tmp")
    with pytest.raises(InvalidArgumentError):
        f.read("")
    with pytest.raises(InvalidArgumentError):
        f.list("/tmp", depth=0)
    with pytest.raises(InvalidArgumentError):
        f.rename("", "/x")


def _make_tree(root):
    os.makedirs(os.path.join(root, "src", "pkg"))
    os.makedirs(os.path.join(root, "empty"))
    with open(os.path.join(root, "src", "pkg", "mod.py"), "w") as fh:
        fh.write("VALUE = 42\n")
    with open(os.path.join(root, "data.bin"), "wb") as fh:
        fh.write(bytes(range(256)) * 40)
    with open(os.path.join(root, "run.sh"), "w") as fh:
        fh.write("#!/bin/sh\necho run\n")
    os.chmod(os.path.join(root, "run.sh"), 0o755)
    os.symlink("data.bin", os.path.join(root, "data.link"))


def _snapshot(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir",)
            else:
                with open(p, "rb") as fh:
                    out[rel] = ("file", fh.read(), os.stat(p).st_mode & 0o777)
    return out


def test_upload_download_tree(shared_sbx, tmp_path):
    src = str(tmp_path / "src")
    _make_tree(src)
    remote = "/srv/tree-" + uuid.uuid4().hex[:8]
    shared_sbx.upload(src, remote)
    r = shared_sbx.exec(f"cd {remote} && python3 -B -c 'import sys; sys.path.insert(0, \"src\"); "
                        f"from pkg.mod import VALUE; print(VALUE)' && ./run.sh && readlink data.link")
    assert r.stdout == "42\nrun\ndata.bin\n", r.stderr
    dst = str(tmp_path / "dst")
    shared_sbx.download(remote, dst)
    assert _snapshot(dst) == _snapshot(src)


def test_upload_download_single_file(shared_sbx, tmp_path):
    p = tmp_path / "one.bin"
    p.write_bytes(b"\x00one\xff")
    os.chmod(p, 0o600)
    shared_sbx.upload(str(p), "/tmp/single/one.bin")
    st = shared_sbx.files.stat("/tmp/single/one.bin")
    assert st.size == 5 and st.mode == "0600"
    shared_sbx.download("/tmp/single/one.bin", str(tmp_path / "back" / "one.bin"))
    assert (tmp_path / "back" / "one.bin").read_bytes() == b"\x00one\xff"
    with pytest.raises(NotFoundError):
        shared_sbx.download("/no/such", str(tmp_path / "nothing"))


def test_typed_errors_lifecycle():
    with pytest.raises(NotFoundError):
        Sandbox.connect("no-such-sandbox")
    with pytest.raises(NotFoundError):
        Sandbox.create(template="no-such-template")
    with pytest.raises(InvalidArgumentError):
        Sandbox.create(template=TEMPLATE, memory_mb=1)
    with pytest.raises(InvalidArgumentError):
        Sandbox.connect("")
    with pytest.raises(UnauthorizedError) as ei:
        Sandbox.list(api_key="wrong-key")
    assert ei.value.code == "unauthenticated"
    with pytest.raises(UnavailableError) as ei:
        Sandbox.list(base_url="unix:///nonexistent/agentbox.sock", api_key="x")
    assert "AGENTBOX_HOST" in str(ei.value)


def test_exec_on_destroyed_sandbox_is_not_found():
    sbx = Sandbox.create(template=TEMPLATE)
    sbx.destroy()
    with pytest.raises(NotFoundError):
        sbx.exec("true")
    sbx.close()


def test_url_is_the_preview_url(shared_sbx):
    net = shared_sbx.info().network
    assert net.get("preview_domain") and net.get("preview_token"), net
    u = shared_sbx.url(8080)
    assert u == f"http://8080-{shared_sbx.id}.{net['preview_domain']}/?agentbox_token={net['preview_token']}"
    with pytest.raises(InvalidArgumentError):
        shared_sbx.url(0)


def test_oversized_request_is_invalid_argument():
    # Over the daemon's JSON limit: 413, refused before the body is read.
    with pytest.raises(InvalidArgumentError) as e:
        Sandbox.create(template=TEMPLATE, env={"BIG": "x" * (2 << 20)})
    assert e.value.status == 413 and "larger than" in str(e.value)


def test_connect_destroyed_is_not_found():
    sbx = Sandbox.create(template=TEMPLATE, ttl_seconds=300)
    sid = sbx.id
    sbx.destroy()
    sbx.close()
    with pytest.raises(NotFoundError) as e:
        Sandbox.connect(sid)
    assert e.value.status == 404 and "destroyed" in str(e.value)


def test_list_pages():
    """list_page walks the sandboxes a page at a time, oldest first, each
    once; a bad limit is refused before any request."""
    label = "pages-" + uuid.uuid4().hex[:8]
    made = [Sandbox.create(template=TEMPLATE, ttl_seconds=300, metadata={"label": label}) for _ in range(3)]
    try:
        seen, cursor, pages = [], None, 0
        while True:
            page = Sandbox.list_page(metadata={"label": label}, limit=2, cursor=cursor)
            pages += 1
            seen += [s.id for s in page.sandboxes]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert pages == 2
        assert seen == [s.id for s in Sandbox.list(metadata={"label": label})]
        assert sorted(seen) == sorted(s.id for s in made)
        with pytest.raises(ValueError):
            Sandbox.list_page(limit=0)
    finally:
        for s in made:
            s.destroy()
            s.close()
