"""Template builds: POST /v1/templates/build (docs/templates.md)."""

from __future__ import annotations

import json
import os
import uuid
from typing import IO, Any, Callable, Dict, Iterator, Optional, Union

from . import _archive
from .errors import InvalidArgumentError, UnavailableError, error_from_code

BuildEvent = Dict[str, Any]


def multipart(spec: bytes, context: Optional[IO[bytes]]) -> "tuple[str, Iterator[bytes]]":
    """The content type and a streamed multipart/form-data body: the spec
    part first, then the context tar, if any."""
    boundary = "agentbox-" + uuid.uuid4().hex

    def body() -> Iterator[bytes]:
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"spec\"; filename=\"spec.yaml\"\r\n"
               "Content-Type: application/x-yaml\r\n\r\n").encode()
        yield spec
        yield b"\r\n"
        if context is not None:
            yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"context\"; filename=\"context.tar\"\r\n"
                   "Content-Type: application/x-tar\r\n\r\n").encode()
            yield from _archive.chunks(context)
            yield b"\r\n"
        yield f"--{boundary}--\r\n".encode()

    return "multipart/form-data; boundary=" + boundary, body()


def prepare(name: str, spec: Union[str, bytes], context_dir: Optional[str]) -> "tuple[bytes, Optional[IO[bytes]]]":
    if not name:
        raise InvalidArgumentError("a template name is required")
    data = spec.encode() if isinstance(spec, str) else bytes(spec)
    ctx = None
    if context_dir is not None:
        if not os.path.isdir(context_dir):
            raise InvalidArgumentError(f"context_dir {context_dir!r} is not a directory")
        ctx = _archive.tar_dir(context_dir)
    return data, ctx


def _handle(line: bytes, on_event: Optional[Callable[[BuildEvent], None]]) -> Optional[Dict[str, Any]]:
    """One NDJSON event: the template of "done", the typed error of
    "error" raised, anything else handed to on_event (None returned)."""
    if not line.strip():
        return None
    ev = json.loads(line)
    t = ev.get("type")
    if t == "done":
        return ev["template"]
    if t == "error":
        e = ev.get("error") or {}
        raise error_from_code(e.get("code", "internal"), e.get("message", "the build failed"), 400)
    if on_event is not None:
        on_event(ev)
    return None


def follow(lines: Iterator[bytes], on_event: Optional[Callable[[BuildEvent], None]]) -> Dict[str, Any]:
    """Read the NDJSON events to the end: the template of "done", or the
    typed error of "error"."""
    for line in lines:
        tpl = _handle(line, on_event)
        if tpl is not None:
            return tpl
    raise UnavailableError("the daemon closed the build's stream before it ended")


async def afollow(lines: Any, on_event: Optional[Callable[[BuildEvent], None]]) -> Dict[str, Any]:
    """follow, for an async iterator of lines."""
    async for line in lines:
        tpl = _handle(line, on_event)
        if tpl is not None:
            return tpl
    raise UnavailableError("the daemon closed the build's stream before it ended")

