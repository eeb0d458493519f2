"""Templates and snapshots through a real OCI registry (Client.push_template,
pull_template, push_snapshot, pull_snapshot) and the fleet calls, against
the daemon of conftest.py. The registry is AGENTBOX_TEST_REGISTRY (HOST:PORT,
which integration/python_sdk_test.go sets from its startRegistry), or one
this module starts from Debian's docker-registry on loopback."""

import asyncio
import os
import secrets
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from agentbox import AsyncClient, AsyncSandbox, Client, NodeStatus, NotSupportedError, PushResult, Sandbox

TEMPLATE = os.environ.get("AGENTBOX_TEST_REGISTRY_TEMPLATE", "busybox")
REGISTRY_BIN = "/usr/bin/docker-registry"


@pytest.fixture(scope="module")
def registry():
    addr = os.environ.get("AGENTBOX_TEST_REGISTRY")
    if addr:
        yield addr
        return
    assert os.path.exists(REGISTRY_BIN), "docker-registry is missing: run scripts/install-test-deps.sh"
    with tempfile.TemporaryDirectory() as d:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            addr = "127.0.0.1:%d" % s.getsockname()[1]
        cfg = os.path.join(d, "config.yml")
        with open(cfg, "w") as f:
            f.write("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
                    "storage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n" % (os.path.join(d, "data"), addr))
        proc = subprocess.Popen([REGISTRY_BIN, "serve", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen("http://%s/v2/" % addr, timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, "docker-registry did not start on " + addr
                time.sleep(0.05)
            yield addr
        finally:
            proc.kill()
            proc.wait()


def test_template_push_pull(registry):
    tag = secrets.token_hex(3)
    ref = "%s/agentbox/sdk-python/%s:%s" % (registry, TEMPLATE, tag)
    name = "sdkreg-py-" + tag
    with Client() as c:
        pushed = c.push_template(TEMPLATE, ref)
        assert isinstance(pushed, PushResult) and pushed.ref == ref and pushed.digest.startswith("sha256:")
        assert c.push_template(TEMPLATE, ref).digest == pushed.digest  # same bytes, same digest
        tpl = c.pull_template(registry + "/agentbox/sdk-python/" + TEMPLATE + "@" + pushed.digest, name)
        try:
            assert tpl.name == name and tpl.version
            with Sandbox.create(template=name, ttl_seconds=120, metadata={"suite": "sdk-python"}) as sbx:
                assert sbx.exec("busybox echo pulled").stdout == "pulled\n"
        finally:
            c.remove_template(name)
        assert name not in [t.name for t in c.templates()]


def test_snapshot_push_pull_async(registry):
    asyncio.run(_snapshot_push_pull(registry))


async def _snapshot_push_pull(registry):
    tag = secrets.token_hex(3)
    ref = "%s/agentbox/sdk-python/snap:%s" % (registry, tag)
    async with AsyncClient() as c:
        async with AsyncSandbox.create(template=TEMPLATE, ttl_seconds=120, metadata={"suite": "sdk-python"}) as sbx:
            await sbx.exec("echo travelled > /root/f")
            snap = await sbx.snapshot()
        pushed = await c.push_snapshot(snap.id, ref)
        assert pushed.digest.startswith("sha256:")
        pulled = await c.pull_snapshot(ref, "sdkreg-py-" + tag)
        assert pulled.id != snap.id and pulled.name == "sdkreg-py-" + tag
        async with AsyncSandbox.create(snapshot=pulled.id, ttl_seconds=120, metadata={"suite": "sdk-python"}) as child:
            assert (await child.exec("cat /root/f")).stdout == "travelled\n"


def test_node_status_and_fleet_nodes():
    with Client() as c:
        st = c.node_status()
        assert isinstance(st, NodeStatus) and st.version and st.cpus > 0 and st.memory_total_mb > 0
        assert any(t["name"] == "container" for t in st.tiers)
        assert TEMPLATE in st.templates
        # A daemon that is not a fleet gateway has no membership table.
        with pytest.raises(NotSupportedError, match="gateway"):
            c.fleet_nodes()
