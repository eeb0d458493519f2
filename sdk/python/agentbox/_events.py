"""The lifecycle event stream (GET /v1/events, Server-Sent Events)."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Dict, Iterable, Iterator, List, Optional

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


def stream(http: SyncHTTP, p: Dict[str, str]) -> Iterator[Dict[str, Any]]:
    try:
        with http.client.stream("GET", "/v1/events", params=p, timeout=_STREAM_TIMEOUT,
                                headers={"Accept": "text/event-stream"}) as resp:
            if resp.status_code >= 300:
                raise api_error(http.cfg, resp.status_code, resp.read())
            parser = _Parser()
            for line in resp.iter_lines():
                ev = parser.line(line)
                if ev is not None:
                    yield ev
    except httpx.HTTPError as e:
        raise transport_error(http.cfg, e) from e


async def astream(http: AsyncHTTP, p: Dict[str, str]) -> AsyncIterator[Dict[str, Any]]:
    try:
        async with http.client.stream("GET", "/v1/events", params=p, timeout=_STREAM_TIMEOUT,
                                      headers={"Accept": "text/event-stream"}) as resp:
            if resp.status_code >= 300:
                raise api_error(http.cfg, resp.status_code, await resp.aread())
            parser = _Parser()
            async for line in resp.aiter_lines():
                ev = parser.line(line)
                if ev is not None:
                    yield ev
    except httpx.HTTPError as e:
        raise transport_error(http.cfg, e) from e
