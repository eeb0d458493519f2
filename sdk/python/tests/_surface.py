"""The public surface of the SDK's classes, as plain data: for each class
its bases and docstring, and for each public member (methods, properties,
class attributes, the attributes __init__ sets, the dunders users call
through ``with``/``async with``/``await``) its kind, signature with
annotations, and docstring. test_surface.py compares it between the
blocking and asyncio classes and with surface.json, the surface as
released; ``python3 tests/_surface.py > tests/surface.json`` rewrites that
file after a deliberate change."""

import inspect
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

import agentbox  # noqa: E402
from agentbox.models import ProcessInfo, SandboxInfo  # noqa: E402

# Blocking class, its asyncio twin.
PAIRS = [("Sandbox", "AsyncSandbox"), ("Files", "AsyncFiles"), ("Process", "AsyncProcess"),
         ("Client", "AsyncClient"), ("Pty", "AsyncPty"), ("Desktop", "AsyncDesktop")]
DUNDERS = ("__init__", "__repr__", "__enter__", "__exit__", "__aenter__", "__aexit__", "__await__",
           "__iter__", "__next__", "__aiter__", "__anext__")


def _kind(cls, name):
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, classmethod):
        fn = raw.__func__
        return ("async classmethod" if inspect.iscoroutinefunction(fn) else "classmethod"), getattr(cls, name)
    if isinstance(raw, staticmethod):
        return "staticmethod", raw.__func__
    if isinstance(raw, property):
        return "property", raw.fget
    if inspect.isfunction(raw):
        if inspect.iscoroutinefunction(raw):
            return "async method", raw
        if inspect.isasyncgenfunction(raw):
            return "async generator", raw
        return "method", raw
    return "attribute " + type(raw).__name__, None


def member(cls, name):
    kind, fn = _kind(cls, name)
    out = {"kind": kind}
    if fn is not None:
        out["signature"] = str(inspect.signature(fn))
        out["doc"] = fn.__doc__
    return out


def _instance_attrs(cls):
    """What __init__ sets that users read (sbx.files, proc.info, pty.pid)."""
    info = SandboxInfo.from_dict({"id": "sb"})
    try:
        if cls.__name__ in ("Sandbox", "AsyncSandbox"):
            obj = cls(info, None)
        elif cls.__name__ in ("Files", "AsyncFiles", "Desktop", "AsyncDesktop"):
            obj = cls(None, "sb")
        elif cls.__name__ in ("Process", "AsyncProcess"):
            obj = cls(None, "sb", ProcessInfo.from_dict({"pid": 1}))
        else:
            return None
    except Exception as e:  # a constructor that needs a live connection
        return {"error": repr(e)}
    return {k: type(v).__name__ for k, v in sorted(vars(obj).items()) if not k.startswith("_")}


def surface_of(cls):
    names = sorted(n for n in dir(cls) if not n.startswith("_") or n in DUNDERS and n in dir(cls))
    names = [n for n in names if not n.startswith("_") or any(n in vars(c) for c in cls.__mro__[:-1])]
    return {
        "bases": [b.__name__ for b in cls.__mro__[1:]],
        "doc": cls.__doc__,
        "members": {n: member(cls, n) for n in names},
        "instance_attributes": _instance_attrs(cls),
    }


def surface():
    out = {"__all__": sorted(agentbox.__all__)}
    for pair in PAIRS:
        for name in pair:
            out[name] = surface_of(getattr(agentbox, name))
    return out


if __name__ == "__main__":
    json.dump(surface(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
