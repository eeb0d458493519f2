"""Background processes and terminals, blocking and asyncio."""

import asyncio
import time

import pytest

from agentbox import AsyncSandbox
from agentbox.errors import ConflictError, InvalidArgumentError, NotFoundError, TimeoutError
from conftest import TEMPLATE


def test_start_wait_output(sbx):
    p = sbx.start("echo out; echo err >&2; exit 3", tag="job")
    assert p.pid > 0 and p.tag == "job"
    info = p.wait(timeout=30)
    assert info.state == "exited" and info.exit_code == 3 and p.exit_code == 3
    out = p.output()
    assert (out.stdout, out.stderr, out.exit_code) == ("out\n", "err\n", 3)
    assert out.stdout_offset == 4 and out.stderr_offset == 4
    assert p.output(stdout_offset=2).stdout == "t\n"
    assert sbx.process("job").pid == p.pid
    assert p.pid in [x.pid for x in sbx.processes()]


def test_wait_timeout_stdin_signal_kill(sbx):
    p = sbx.start(["cat"])
    with pytest.raises(TimeoutError) as ei:
        p.wait(timeout=0.3)
    assert ei.value.code == "deadline_exceeded"
    p.send_stdin("hello ")
    p.send_stdin(b"world", eof=True)
    assert p.wait(timeout=30).exit_code == 0
    assert p.output().stdout == "hello world"

    q = sbx.start("trap 'echo got-int; exit 5' INT; while :; do sleep 0.1; done")
    time.sleep(0.5)
    q.signal("SIGINT")
    assert q.wait(timeout=30).exit_code == 5
    assert "got-int" in q.output().stdout

    r = sbx.start("sleep 1000 & sleep 1000")
    assert r.refresh().state == "running"
    r.kill()  # kills the tree, waits for its end, forgets the process
    assert r.pid not in [x.pid for x in sbx.processes()]
    with pytest.raises(NotFoundError):
        r.refresh()
    assert "sleep 1000" not in sbx.exec("ps -eo args").stdout


def test_start_timeout_and_errors(sbx):
    p = sbx.start("sleep 30", timeout=0.5)
    info = p.wait(timeout=30)
    assert info.timed_out and info.state == "exited"
    with pytest.raises(NotFoundError):
        sbx.process("no-such-tag")
    with pytest.raises(InvalidArgumentError):
        sbx.start("true", cwd="/no/such/dir")
    sbx.start("sleep 30", tag="dup")
    with pytest.raises(ConflictError):
        sbx.start("sleep 30", tag="dup")


def test_pty_sync(sbx):
    with sbx.pty(cols=100, rows=30, cmd="stty size; read line; echo got:$line; exit 4") as t:
        assert t.pid > 0
        assert b"30 100" in t.read_until(b"30 100", timeout=30)
        t.write("typed\n")
        assert b"got:typed" in t.read_until(b"got:typed", timeout=30)
        while t.read(timeout=30):
            pass
        assert t.exit_code == 4


def test_pty_shell_resize(sbx):
    t = sbx.pty()
    try:
        t.write("stty size\n")
        t.read_until(b"24 80", timeout=30)
        t.resize(120, 40)
        time.sleep(0.2)
        t.write("stty size\n")
        t.read_until(b"40 120", timeout=30)
        with pytest.raises(InvalidArgumentError):
            t.resize(0, 10)
    finally:
        t.close()


def test_processes_and_pty_async():
    async def main():
        async with AsyncSandbox.create(template=TEMPLATE) as sbx:
            p = await sbx.start("cat; exit 2", tag="a")
            await p.send_stdin("abc", eof=True)
            assert (await p.wait(timeout=30)).exit_code == 2
            assert (await p.output()).stdout == "abc"
            assert (await sbx.process("a")).pid == p.pid
            assert [x.tag for x in await sbx.processes()].count("a") == 1
            q = await sbx.start("sleep 100")
            with pytest.raises(TimeoutError):
                await q.wait(timeout=0.2)
            await q.signal(15)
            assert (await q.wait(timeout=30)).signal == "SIGTERM"
            r = await sbx.start("sleep 100")
            await r.kill()
            with pytest.raises(NotFoundError):
                await r.refresh()
            async with await sbx.pty(cols=90, rows=20, cmd=["sh", "-c", "stty size; read x; echo [$x]"]) as t:
                await t.read_until(b"20 90", timeout=30)
                await t.write(b"zz\n")
                await t.read_until(b"[zz]", timeout=30)
    asyncio.run(main())
