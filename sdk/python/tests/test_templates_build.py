"""Template builds through the Python SDK (Client.build_template)."""

import uuid

import pytest

from agentbox import Client, InvalidArgumentError, Sandbox


_cleanup = []


@pytest.fixture(autouse=True)
def _remove_templates():
    """The SDK has no call to remove a template: the test's go by hand."""
    yield
    with Client() as c:
        while _cleanup:
            try:
                c._http.request("DELETE", "/v1/templates/" + _cleanup.pop())
            except Exception:
                pass


def test_build_template(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "hello.txt").write_text("hello from the context\n")
    name = "pysdk-build-" + uuid.uuid4().hex[:6]
    spec = """from: busybox
steps:
  - copy: app /srv/app
  - run: cat /srv/app/hello.txt > /built
  - env: {BUILT: "yes"}
"""
    events = []
    with Client() as c:
        _cleanup.append(name)
        t = c.build_template(name, spec, context_dir=str(tmp_path), on_event=events.append)
        assert t.name == name and t.version == "1" and t.from_template == "busybox@1" and len(t.layers) == 2
        assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3]
        # Nothing changed: all cached, same version.
        events.clear()
        again = c.build_template(name, spec, context_dir=str(tmp_path), on_event=events.append)
        assert again.version == "1"
        assert all(e.get("cached") for e in events if e["type"] == "step" and e.get("layer"))
        with Sandbox.create(template=name, ttl_seconds=120) as sbx:
            r = sbx.exec("cat /built; echo $BUILT")
            assert r.stdout == "hello from the context\nyes\n"


def test_build_template_failure():
    name = "pysdk-fail-" + uuid.uuid4().hex[:6]
    with Client() as c:
        with pytest.raises(InvalidArgumentError) as ei:
            c.build_template(name, "from: busybox\nsteps:\n  - run: echo nope; exit 7\n")
        assert "exit code 7" in str(ei.value) and "nope" in str(ei.value)
        with pytest.raises(InvalidArgumentError) as ei:
            c.build_template(name, "from: busybox\nsteps:\n  - runn: x\n")
        assert "line 3" in str(ei.value)


def test_build_template_async():
    import asyncio

    from agentbox import AsyncClient

    name = "pysdk-abuild-" + uuid.uuid4().hex[:6]
    _cleanup.append(name)
    events = []

    async def main():
        async with AsyncClient() as c:
            return await c.build_template(name, "from: busybox\nsteps:\n  - run: echo async-built > /a\n",
                                          on_event=events.append)

    t = asyncio.run(main())
    assert t.name == name and len(t.layers) == 1
    assert any(e["type"] == "step_done" and e.get("exit_code") == 0 for e in events)
