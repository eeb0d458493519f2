"""Memory modes (gvisor tier): pause to disk, fork and snapshot with memory;
the container tier refuses them."""

import pytest

from agentbox import Sandbox
from agentbox.errors import ConflictError


def sleepers(s):
    return s.exec("ps -o args | grep -c '^sleep 600' || true").stdout.strip()


def test_memory_modes_gvisor():
    with Sandbox.create(template="busybox", isolation="gvisor", ttl_seconds=300, metadata={"suite": "sdk-python"}) as s:
        s.exec("sleep 600 >/dev/null 2>&1 &")
        assert s.pause(to_disk=True).state == "paused"
        assert s.resume().state == "running"
        assert sleepers(s) == "1"
        kids = s.fork(count=1, memory=True)
        try:
            assert sleepers(kids[0]) == "1" and kids[0].id != s.id
        finally:
            for k in kids:
                k.destroy()
        snap = s.snapshot(memory=True)
        assert snap.memory


def test_memory_modes_refused_on_container():
    with Sandbox.create(template="busybox", isolation="container", ttl_seconds=120, metadata={"suite": "sdk-python"}) as s:
        with pytest.raises(ConflictError):
            s.pause(to_disk=True)
        with pytest.raises(ConflictError):
            s.fork(memory=True)
