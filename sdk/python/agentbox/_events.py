"""The lifecycle event stream (GET /v1/events, Server-Sent Events)."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional

import httpx

from ._http import AsyncHTTP, SyncHTTP
from ._common import api_error, transport_error

# The stream idles between events (the daemon sends a keepalive comment
# every 15 s): no read timeout.
_STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)


def params(types: Optional[Iterable[str]], sandbox: Optional[str], tenant: Optional[str]) -> Dict[str, str]:
    p: Dict[str, str] = {}
    if types:
        p["type"] = ",".join(types)
    if sandbox:
        p["sandbox"] = sandbox
    if tenant:
        p["tenant"] = tenant
    return p


def _lines(buf: bytearray, chunk: bytes) -> List[str]:
    """Appends chunk to buf and takes the complete lines out of it (httpx's
    own iter_lines holds lines back in some versions)."""
    buf.extend(chunk)
    out: List[str] = []
    while True:
        i = buf.find(b"\n")
        if i < 0:
            return out
        out.append(buf[:i].rstrip(b"\r").decode("utf-8", "replace"))
        del buf[:i + 1]


class _Parser:
    """Turns SSE lines into event dicts; ``dropped`` counts events the
    daemon dropped because the reader was slow."""

    def __init__(self) -> None:
        self.kind = ""
        self.data: List[str] = []
        self.dropped = 0

    def line(self, line: str) -> Optional[Dict[str, Any]]:
        if line == "":
            kind, data = self.kind, self.data
            self.kind, self.data = "", []
            if not data:
                return None
            payload = json.loads("\n".join(data))
            if kind == "dropped":
                self.dropped += int(payload.get("dropped", 0))
                return None
            return payload
        if line.startswith(":"):
            return None
        if line.startswith("event:"):
            self.kind = line[len("event:"):].strip()
        elif line.startswith("data:"):
            self.data.append(line[len("data:"):].lstrip(" "))
        return None


class EventStream:
    """An open event stream: iterate it for event dicts; ``close()`` (or
    ``with``) ends it. The subscription exists once the constructor
    returns, so nothing that happens after is missed."""

    def __init__(self, http: SyncHTTP, p: Dict[str, str]) -> None:
        self._cfg = http.cfg
        self._cm = http.client.stream("GET", "/v1/events", params=p, timeout=_STREAM_TIMEOUT,
                                      headers={"Accept": "text/event-stream"})
        try:
            self._resp = self._cm.__enter__()
        except httpx.HTTPError as e:
            raise transport_error(self._cfg, e) from e
        if self._resp.status_code >= 300:
            body = self._resp.read()
            self._cm.__exit__(None, None, None)
            raise api_error(self._cfg, self._resp.status_code, body)
        self._chunks = self._resp.iter_bytes()
        self._buf = bytearray()
        self._pending: List[str] = []
        self._parser = _Parser()

    @property
    def dropped(self) -> int:
        """Events the daemon dropped because this reader was too slow."""
        return self._parser.dropped

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Dict[str, Any]:
        try:
            while True:
                while self._pending:
                    ev = self._parser.line(self._pending.pop(0))
                    if ev is not None:
                        return ev
                chunk = next(self._chunks, None)
                if chunk is None:
                    raise StopIteration
                self._pending = _lines(self._buf, chunk)
        except httpx.HTTPError as e:
            raise transport_error(self._cfg, e) from e

    def close(self) -> None:
        self._cm.__exit__(None, None, None)

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncEventStream:
    """The async form of EventStream: ``st = await client.events()``, then
    ``async for ev in st``; ``await st.aclose()`` (or ``async with``) ends it."""

    def __init__(self, http: AsyncHTTP, p: Dict[str, str]) -> None:
        self._cfg = http.cfg
        self._cm = http.client.stream("GET", "/v1/events", params=p, timeout=_STREAM_TIMEOUT,
                                      headers={"Accept": "text/event-stream"})
        self._parser = _Parser()
        self._buf = bytearray()
        self._pending: List[str] = []

    async def _open(self) -> "AsyncEventStream":
        try:
            self._resp = await self._cm.__aenter__()
        except httpx.HTTPError as e:
            raise transport_error(self._cfg, e) from e
        if self._resp.status_code >= 300:
            body = await self._resp.aread()
            await self._cm.__aexit__(None, None, None)
            raise api_error(self._cfg, self._resp.status_code, body)
        self._chunks = self._resp.aiter_bytes()
        return self

    @property
    def dropped(self) -> int:
        """Events the daemon dropped because this reader was too slow."""
        return self._parser.dropped

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        try:
            while True:
                while self._pending:
                    ev = self._parser.line(self._pending.pop(0))
                    if ev is not None:
                        return ev
                chunk = await self._chunks.__anext__()  # StopAsyncIteration at the end
                self._pending = _lines(self._buf, chunk)
        except httpx.HTTPError as e:
            raise transport_error(self._cfg, e) from e

    async def aclose(self) -> None:
        await self._cm.__aexit__(None, None, None)

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
