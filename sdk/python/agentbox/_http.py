"""The HTTP layer: one httpx client (a connection pool) per configuration,
shared by every Sandbox of the process, with errors typed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import weakref
from collections.abc import Iterator as _Iterator
from typing import Any, AsyncIterator, Dict, Iterator, Optional, Tuple

import httpx

from ._calls import Call
from ._common import DEFAULT_TIMEOUT, api_error, decode_json, headers, transport_error
from ._config import Config, resolve


def _client_args(cfg: Config, timeout: Optional[float]) -> Dict[str, Any]:
    t = DEFAULT_TIMEOUT if timeout is None else httpx.Timeout(timeout, connect=min(10.0, timeout))
    # A unix socket never goes through an HTTP proxy from the environment.
    return {"base_url": cfg.base_url, "headers": headers(cfg), "timeout": t, "trust_env": cfg.socket is None}


# Making an httpx client costs tens of milliseconds (its TLS context), more
# than a create: Sandbox objects of one configuration share one client and
# its connections. Clients are per process (a forked child makes its own)
# and, for asyncio, per event loop (connections belong to their loop).
_Key = Tuple[Config, Optional[float], int]
_sync_clients: Dict[_Key, httpx.Client] = {}
_async_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[_Key, httpx.AsyncClient]]" = \
    weakref.WeakKeyDictionary()
_clients_lock = threading.Lock()


def _sync_client(cfg: Config, timeout: Optional[float]) -> httpx.Client:
    key = (cfg, timeout, os.getpid())
    with _clients_lock:
        c = _sync_clients.get(key)
        if c is None or c.is_closed:
            transport = httpx.HTTPTransport(uds=cfg.socket) if cfg.socket else None
            c = _sync_clients[key] = httpx.Client(transport=transport, **_client_args(cfg, timeout))
        return c


def _async_client(cfg: Config, timeout: Optional[float]) -> "Tuple[httpx.AsyncClient, bool]":
    """The loop's shared client, or a private one (True) outside a loop."""
    def make() -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(uds=cfg.socket) if cfg.socket else None
        return httpx.AsyncClient(transport=transport, **_client_args(cfg, timeout))
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return make(), True
    key = (cfg, timeout, os.getpid())
    with _clients_lock:
        clients = _async_clients.setdefault(loop, {})
        c = clients.get(key)
        if c is None or c.is_closed:
            c = clients[key] = make()
        return c, False


class SyncHTTP:
    """Blocking requests to one daemon, over the configuration's shared
    connection pool."""

    def __init__(self, cfg: Config, timeout: Optional[float] = None) -> None:
        self.cfg = cfg
        self.timeout = timeout
        self.client = _sync_client(cfg, timeout)

    @classmethod
    def open(cls, api_key: Optional[str], base_url: Optional[str], timeout: Optional[float]) -> "SyncHTTP":
        return cls(resolve(api_key, base_url), timeout)

    def clone(self) -> "SyncHTTP":
        return SyncHTTP(self.cfg, self.timeout)

    def close(self) -> None:
        """Nothing to release: the pool is shared and lives with the
        process; its idle connections close on their own."""

    def request(self, method: str, path: str, *, params: Optional[Dict[str, Any]] = None,
                json_body: Any = None, content: Any = None, content_type: Optional[str] = None) -> bytes:
        """Send a request and return the answer's body; a non-2xx answer
        raises the typed error it names."""
        with self.stream(method, path, params=params, json_body=json_body, content=content,
                         content_type=content_type) as resp:
            try:
                return resp.read()
            except httpx.HTTPError as e:
                raise transport_error(self.cfg, e) from e

    def json(self, method: str, path: str, **kw: Any) -> Any:
        return decode_json(self.cfg, self.request(method, path, **kw), f"{method} {path}")

    def call(self, c: Call) -> Any:
        """Send a described call (_calls.py) and decode its answer."""
        if c.decode is None:
            body = self.request(c.method, c.path, **c.request_args())
            return body if c.raw else None
        return c.decode(self.json(c.method, c.path, **c.request_args()))

    @contextlib.contextmanager
    def stream(self, method: str, path: str, *, params: Optional[Dict[str, Any]] = None,
               json_body: Any = None, content: Any = None,
               content_type: Optional[str] = None) -> Iterator[httpx.Response]:
        """Send a request and yield the response with its body unread."""
        h = {}
        if json_body is not None:
            content = json.dumps(json_body).encode()
            h["Content-Type"] = "application/json"
        if content_type:
            h["Content-Type"] = content_type
        try:
            with self.client.stream(method, path, params=params, content=content, headers=h) as resp:
                if resp.status_code >= 300:
                    raise api_error(self.cfg, resp.status_code, resp.read())
                yield resp
        except httpx.HTTPError as e:
            raise transport_error(self.cfg, e) from e


async def _aiterate(it: Iterator[bytes]) -> AsyncIterator[bytes]:
    """An async iterator over a sync one: a streamed request body (a file's
    chunks, a build's multipart body) for httpx's async client."""
    for chunk in it:
        yield chunk


class AsyncHTTP:
    """Asynchronous requests to one daemon, over the configuration's
    shared connection pool of the running event loop."""

    def __init__(self, cfg: Config, timeout: Optional[float] = None) -> None:
        self.cfg = cfg
        self.timeout = timeout
        self.client, self._private = _async_client(cfg, timeout)

    @classmethod
    def open(cls, api_key: Optional[str], base_url: Optional[str], timeout: Optional[float]) -> "AsyncHTTP":
        return cls(resolve(api_key, base_url), timeout)

    def clone(self) -> "AsyncHTTP":
        return AsyncHTTP(self.cfg, self.timeout)

    async def close(self) -> None:
        if self._private:
            await self.client.aclose()

    async def request(self, method: str, path: str, *, params: Optional[Dict[str, Any]] = None,
                      json_body: Any = None, content: Any = None, content_type: Optional[str] = None) -> bytes:
        async with self.stream(method, path, params=params, json_body=json_body, content=content,
                               content_type=content_type) as resp:
            try:
                return await resp.aread()
            except httpx.HTTPError as e:
                raise transport_error(self.cfg, e) from e

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        return decode_json(self.cfg, await self.request(method, path, **kw), f"{method} {path}")

    async def call(self, c: Call) -> Any:
        """Send a described call (_calls.py) and decode its answer."""
        if c.decode is None:
            body = await self.request(c.method, c.path, **c.request_args())
            return body if c.raw else None
        return c.decode(await self.json(c.method, c.path, **c.request_args()))

    @contextlib.asynccontextmanager
    async def stream(self, method: str, path: str, *, params: Optional[Dict[str, Any]] = None,
                     json_body: Any = None, content: Any = None,
                     content_type: Optional[str] = None) -> AsyncIterator[httpx.Response]:
        """Send a request and yield the response with its body unread. A
        sync iterator as ``content`` is sent as a stream, like SyncHTTP's."""
        if isinstance(content, _Iterator):
            content = _aiterate(content)
        h = {}
        if json_body is not None:
            content = json.dumps(json_body).encode()
            h["Content-Type"] = "application/json"
        if content_type:
            h["Content-Type"] = content_type
        try:
            async with self.client.stream(method, path, params=params, content=content, headers=h) as resp:
                if resp.status_code >= 300:
                    raise api_error(self.cfg, resp.status_code, await resp.aread())
                yield resp
        except httpx.HTTPError as e:
            raise transport_error(self.cfg, e) from e
