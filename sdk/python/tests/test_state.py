"""Pause, resume, snapshots, fork and reset, blocking and asyncio."""

import asyncio
import time
import uuid

import pytest

from agentbox import AsyncSandbox, Sandbox
from agentbox.errors import ConflictError, InvalidArgumentError
from conftest import TEMPLATE


def test_pause_resume(sbx):
    sbx.files.write("/root/keep.txt", "kept")
    assert sbx.pause().state == "paused"
    with pytest.raises(ConflictError):
        sbx.exec("true")
    assert sbx.resume().state == "running"
    assert sbx.exec("cat /root/keep.txt").stdout == "kept"


def test_snapshot_create_from_it_and_reset(sbx):
    sbx.files.write("/root/state.txt", "v1")
    name = "snap-" + uuid.uuid4().hex[:8]
    snap = sbx.snapshot(name=name)
    assert snap.id and snap.name == name and snap.sandbox_id == sbx.id
    with Sandbox.create(snapshot=name, ttl_seconds=120) as child:
        assert child.files.read_text("/root/state.txt") == "v1"
    sbx.files.write("/root/state.txt", "v2")
    sbx.files.write("/root/extra.txt", "x")
    sbx.reset()
    assert not sbx.files.exists("/root/state.txt") and not sbx.files.exists("/root/extra.txt")
    sbx.reset(snapshot=name)
    assert sbx.files.read_text("/root/state.txt") == "v1"
    # A plain reset now goes back to that snapshot; template=True leaves it.
    sbx.files.write("/root/state.txt", "v3")
    sbx.reset()
    assert sbx.files.read_text("/root/state.txt") == "v1"
    sbx.reset(template=True)
    assert not sbx.files.exists("/root/state.txt")
    sbx.files.write("/root/extra.txt", "x")
    sbx.reset()
    assert not sbx.files.exists("/root/state.txt") and not sbx.files.exists("/root/extra.txt")
    with pytest.raises(InvalidArgumentError):
        sbx.reset(snapshot=name, template=True)


def test_fork(sbx):
    sbx.files.write("/root/origin.txt", "parent")
    kids = sbx.fork(count=2)
    try:
        assert len(kids) == 2 and len({k.id for k in kids} | {sbx.id}) == 3
        for i, k in enumerate(kids):
            assert k.files.read_text("/root/origin.txt") == "parent"
            k.files.write("/root/origin.txt", f"kid{i}")
        assert sbx.files.read_text("/root/origin.txt") == "parent"
        assert [k.files.read_text("/root/origin.txt") for k in kids] == ["kid0", "kid1"]
    finally:
        for k in kids:
            k.destroy()
            k.close()
    with pytest.raises(InvalidArgumentError):
        sbx.fork(count=0)


def test_state_async():
    async def main():
        async with AsyncSandbox.create(template=TEMPLATE) as sbx:
            await sbx.files.write("/root/a.txt", "a")
            assert (await sbx.pause()).state == "paused"
            assert (await sbx.resume()).state == "running"
            snap = await sbx.snapshot()
            assert snap.id
            kids = await sbx.fork()
            assert len(kids) == 1
            async with kids[0] as kid:
                assert await kid.files.read_text("/root/a.txt") == "a"
            await sbx.files.write("/root/b.txt", "b")
            await sbx.reset(snapshot=snap.id)
            assert not await sbx.files.exists("/root/b.txt")
    asyncio.run(main())


def test_idle_timeout_pauses():
    with Sandbox.create(template=TEMPLATE, idle_timeout=1, on_timeout="pause", ttl_seconds=120) as sbx:
        deadline = time.monotonic() + 15
        while sbx.info().state != "paused":
            assert time.monotonic() < deadline, "idle_timeout=1 did not pause the sandbox"
            time.sleep(0.2)
        assert sbx.resume().state == "running"
