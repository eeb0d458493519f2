"""The SDK's public surface cannot drift: sandbox.py is what
scripts/gen_sync.py makes of async_sandbox.py, the blocking and asyncio
classes are twins, and both are as released (surface.json). No daemon."""

import difflib
import importlib.util
import json
import os
import re

import pytest

import _surface

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "scripts", "gen_sync.py")


def _gen():
    spec = importlib.util.spec_from_file_location("gen_sync", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen_sync = _gen()


def test_sandbox_py_is_generated_from_async_sandbox_py():
    with open(gen_sync.SOURCE, encoding="utf-8") as f:
        want = gen_sync.generate(f.read())
    with open(gen_sync.TARGET, encoding="utf-8") as f:
        have = f.read()
    diff = "".join(difflib.unified_diff(have.splitlines(True), want.splitlines(True), "sandbox.py", "generated"))
    assert have == want, ("agentbox/sandbox.py is stale or was edited by hand: edit async_sandbox.py and run "
                          "python3 sdk/python/scripts/gen_sync.py\n" + diff)


def test_surface_as_released():
    with open(os.path.join(HERE, "surface.json"), encoding="utf-8") as f:
        want = json.load(f)
    have = json.loads(json.dumps(_surface.surface()))
    if have != want:
        a = json.dumps(want, indent=1, sort_keys=True).splitlines(True)
        b = json.dumps(have, indent=1, sort_keys=True).splitlines(True)
        pytest.fail("the SDK's public surface changed; if that is meant, rewrite tests/surface.json with "
                    "`python3 sdk/python/tests/_surface.py > sdk/python/tests/surface.json` and say so in "
                    "docs/sdk-python.md\n" + "".join(difflib.unified_diff(a, b, "surface.json", "now")))


_NAMES = re.compile(r"\b(" + "|".join(map(re.escape, gen_sync.RENAMES)) + r")\b")


def _blocking(text):
    """What a piece of the asyncio surface reads as in the blocking one."""
    if text is None:
        return None
    return _NAMES.sub(lambda m: gen_sync.RENAMES[m.group(1)], text)


@pytest.mark.parametrize("sync_name,async_name", [p for p in _surface.PAIRS if p[0] != "Pty"])
def test_blocking_and_async_twins(sync_name, async_name):
    """Same members, same parameters and defaults, same return types (the
    asyncio ones named Async...), coroutines where the blocking twin
    blocks; AsyncSandbox.create alone returns an awaitable that is also an
    async context manager."""
    s = _surface.surface()
    sync, asy = s[sync_name], s[async_name]
    assert sync["bases"] == [_blocking(b) for b in asy["bases"]]
    attrs = asy["instance_attributes"]
    assert sync["instance_attributes"] == (None if attrs is None else {k: _blocking(v) for k, v in attrs.items()})
    amembers = {_blocking(n): m for n, m in asy["members"].items()}
    assert sorted(sync["members"]) == sorted(amembers)
    for name, sm in sync["members"].items():
        am = amembers[name]
        sig = _blocking(am.get("signature"))
        kind = am["kind"]
        if (async_name, name) == ("AsyncSandbox", "create"):
            assert sig.endswith("-> '_Creating'"), sig
            sig = sig[:-len("'_Creating'")] + "\"'Sandbox'\""
            from agentbox.async_sandbox import _Creating
            assert hasattr(_Creating, "__await__") and hasattr(_Creating, "__aenter__")
        elif sm["kind"] in ("method", "classmethod") and name not in ("__init__", "__repr__"):
            assert kind == "async " + sm["kind"], name
            kind = sm["kind"]
        assert (kind, sig) == (sm["kind"], sm.get("signature")), name
        # The blocking twin documents every method the asyncio one does.
        assert am.get("doc") is None or sm.get("doc"), name


def test_generator_rules():
    src = '''"""asyncio doc"""
from . import x
from ._http import AsyncHTTP

# marker
_ASYNC = True

if _ASYNC:
    import asyncio


@async_doc("""asyncio class doc""")
class AsyncSandbox:
    """blocking class doc"""

    @async_doc("""asyncio method doc,
        two lines""")
    async def get(self, a: int,
                  b: "AsyncSandbox") -> AsyncHTTP:
        """blocking method doc"""
        r = await self._http.call(x.f(a,
                                      b))
        async with self._http.stream("GET", "/p",
                                     params={}) as resp:
            async for chunk in resp.aiter_raw():
                if _ASYNC:  # a comment
                    await asyncio.sleep(0)
                else:
                    time.sleep(0)  # AsyncSandbox stays as written here
        if not _ASYNC:
            print("blocking only", AsyncHTTP)
        return f"AsyncSandbox({r})"

    async def parens(self):
        return (await self.read(a)).decode(), f(await g()), (await h(a, b)).x, ((await i()), 1)
'''
    want = gen_sync.HEADER + gen_sync.SYNC_DOC + '''from . import x
from ._http import SyncHTTP

# marker
_ASYNC = False


class Sandbox:
    """blocking class doc"""

    def get(self, a: int,
            b: "Sandbox") -> SyncHTTP:
        """blocking method doc"""
        r = self._http.call(x.f(a,
                                b))
        with self._http.stream("GET", "/p",
                               params={}) as resp:
            for chunk in resp.iter_raw():
                time.sleep(0)  # AsyncSandbox stays as written here
        print("blocking only", AsyncHTTP)
        return f"Sandbox({r})"

    def parens(self):
        return self.read(a).decode(), f(g()), h(a, b).x, (i(), 1)
'''
    got = gen_sync.generate(src)
    assert got == want, "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "want", "got"))
