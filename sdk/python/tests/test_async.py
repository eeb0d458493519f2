"""The asyncio SDK against a real daemon: the same surface as the blocking
one (the behaviour suite also runs through it, in test_behaviour.py)."""

import asyncio
import io
import os
import uuid

import pytest

from agentbox import AsyncClient, AsyncSandbox
from agentbox.errors import (ConflictError, InvalidArgumentError, NotFoundError, NotSupportedError,
                             UnauthorizedError)
from conftest import TEMPLATE


def run(coro):
    return asyncio.run(coro)


def test_async_context_manager_and_exec():
    async def main():
        async with AsyncSandbox.create(template=TEMPLATE, ttl_seconds=300) as sbx:
            r = await sbx.exec("python3 -c 'print(sum(range(101)))'")
            assert (r.stdout, r.stderr, r.exit_code) == ("5050\n", "", 0)
            sid = sbx.id
        with pytest.raises(NotFoundError):
            await AsyncSandbox.connect(sid)
    run(main())


def test_async_awaited_create_lifecycle():
    async def main():
        label = uuid.uuid4().hex
        sbx = await AsyncSandbox.create(template=TEMPLATE, ttl_seconds=300, metadata={"label": label})
        try:
            assert (await sbx.info()).state == "running"
            assert [s.id for s in await AsyncSandbox.list(metadata={"label": label})] == [sbx.id]
            assert (await sbx.set_ttl(1000)).expires_at is not None
            r = await sbx.exec("echo $X; pwd; whoami; cat", env={"X": "y"}, cwd="/tmp", user="nobody",
                               stdin="in")
            assert r.stdout == "y\n/tmp\nnobody\nin"
            r = await sbx.exec("sleep 30", timeout=0.5)
            assert r.timed_out and r.exit_code == 137
            u = await sbx.url(3000)
            assert u.startswith(f"http://3000-{sbx.id}.") and "agentbox_token=" in u
        finally:
            await sbx.destroy()
            await sbx.close()
    run(main())


def test_async_callbacks_sync_and_coroutine_in_order():
    async def main():
        async with AsyncSandbox.create(template=TEMPLATE) as sbx:
            events = []

            async def on_err(s):
                await asyncio.sleep(0)
                events.append(("err", s))
            r = await sbx.exec("for i in 1 2 3; do echo o$i; sleep 0.2; echo e$i >&2; sleep 0.2; done",
                               on_stdout=lambda s: events.append(("out", s)), on_stderr=on_err)
            assert [k for k, _ in events] == ["out", "err"] * 3
            assert "".join(s for k, s in events if k == "out") == r.stdout == "o1\no2\no3\n"
            assert r.stderr == "e1\ne2\ne3\n"
    run(main())


def test_async_files_and_trees(tmp_path):
    async def main():
        async with AsyncSandbox.create(template=TEMPLATE) as sbx:
            f = sbx.files
            blob = os.urandom(100_000)
            assert (await f.write("/tmp/a/b.bin", blob)).size == len(blob)
            assert await f.read("/tmp/a/b.bin") == blob
            await f.write("/tmp/a/c.bin", io.BytesIO(blob), mode=0o600)
            assert (await f.stat("/tmp/a/c.bin")).mode == "0600"
            assert await f.read("/tmp/a/c.bin") == blob
            await f.write("/tmp/a/t.txt", "tëxt")
            assert await f.read_text("/tmp/a/t.txt") == "tëxt"
            out = io.BytesIO()
            assert await f.read_to("/tmp/a/t.txt", out) == len("tëxt".encode())
            assert (await f.mkdir("/tmp/a/d/e")).is_dir
            assert sorted(e.name for e in await f.list("/tmp/a")) == ["b.bin", "c.bin", "d", "t.txt"]
            assert len(await f.list("/tmp/a", depth=2)) == 5
            assert await f.exists("/tmp/a/t.txt") and not await f.exists("/tmp/a/zz")
            await f.rename("/tmp/a/t.txt", "/tmp/a/d/t.txt")
            assert await f.exists("/tmp/a/d/t.txt")
            await f.remove("/tmp/a/b.bin")
            with pytest.raises(ConflictError):
                await f.remove("/tmp/a/d")
            with pytest.raises(NotFoundError):
                await f.read("/tmp/a/b.bin")
            with pytest.raises(InvalidArgumentError):
                await f.mkdir("")

            src = tmp_path / "src"
            (src / "x" / "y").mkdir(parents=True)
            (src / "x" / "y" / "z.bin").write_bytes(bytes(range(256)))
            (src / "top.txt").write_text("top")
            await sbx.upload(str(src), "/srv/up")
            assert (await sbx.exec("cat /srv/up/top.txt; wc -c < /srv/up/x/y/z.bin")).stdout == "top256\n"
            await sbx.download("/srv/up", str(tmp_path / "dst"))
            assert (tmp_path / "dst" / "x" / "y" / "z.bin").read_bytes() == bytes(range(256))
            assert (tmp_path / "dst" / "top.txt").read_text() == "top"
            await sbx.upload(str(src / "top.txt"), "/srv/one.txt")
            await sbx.download("/srv/one.txt", str(tmp_path / "one.txt"))
            assert (tmp_path / "one.txt").read_text() == "top"
            await f.remove("/tmp/a", recursive=True)
            assert not await f.exists("/tmp/a")
    run(main())


def test_async_client_and_errors():
    async def main():
        async with AsyncClient() as c:
            assert (await c.health()).status == "ok"
            assert TEMPLATE in [t.name for t in await c.templates()]
            assert (await c.template(TEMPLATE)).name == TEMPLATE
        with pytest.raises(NotFoundError):
            await AsyncSandbox.connect("no-such-sandbox")
        with pytest.raises(NotFoundError):
            await AsyncSandbox.create(template="no-such-template")
        with pytest.raises(InvalidArgumentError):
            async with AsyncSandbox.create(template=TEMPLATE, memory_mb=1):
                pass
        with pytest.raises(UnauthorizedError):
            await AsyncSandbox.list(api_key="wrong-key")
    run(main())


def test_async_many_sandboxes_concurrently():
    async def main():
        async def one(i):
            async with AsyncSandbox.create(template=TEMPLATE) as sbx:
                return (await sbx.exec(f"echo {i}")).stdout
        outs = await asyncio.gather(*(one(i) for i in range(4)))
        assert outs == [f"{i}\n" for i in range(4)]
    run(main())
