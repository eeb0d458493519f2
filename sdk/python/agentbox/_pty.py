"""Interactive terminals: POST .../pty starts a process on a new terminal,
GET .../pty/{pid}/ws carries it (binary frames: terminal bytes both ways;
text frames: {"type":"resize","cols","rows"} from the client,
{"type":"exit","exit_code"} from the server)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Coroutine, Dict, Optional, TypeVar

import websockets
import websockets.client
import websockets.exceptions

from ._common import Data, headers, sandbox_path, to_bytes, transport_error
from ._config import Config
from ._http import AsyncHTTP
from .errors import AgentboxError, InvalidArgumentError, NotFoundError, TimeoutError, error_from_status

T = TypeVar("T")


def pty_body(cols: int, rows: int, cmd: Any, env: Optional[Dict[str, str]], cwd: Optional[str],
             user: Optional[str]) -> Dict[str, Any]:
    from ._common import command_fields
    if cols <= 0 or rows <= 0:
        raise InvalidArgumentError(f"a terminal wants positive cols and rows, got {cols}x{rows}")
    body: Dict[str, Any] = {"cols": cols, "rows": rows}
    if cmd is not None:
        body.update(command_fields(cmd))
    if env:
        body["env"] = dict(env)
    if cwd:
        body["cwd"] = cwd
    if user:
        body["user"] = str(user)
    return body


class AsyncPty:
    """A terminal in a sandbox (from ``AsyncSandbox.pty``).

    ``read()`` returns the terminal's next bytes, or b"" once the process
    has exited (then ``exit_code`` is set); ``write()`` types into it.
    """

    def __init__(self, http: AsyncHTTP, sandbox_id: str, pid: int, pty_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id
        self.pid = pid
        self.id = pty_id
        self.exit_code: Optional[int] = None
        self._ws: Any = None

    @classmethod
    async def start(cls, http: AsyncHTTP, sandbox_id: str, body: Dict[str, Any]) -> "AsyncPty":
        d = await http.json("POST", sandbox_path(sandbox_id, "/pty"), json_body=body)
        t = cls(http, sandbox_id, int(d["pid"]), str(d.get("id", d["pid"])))
        try:
            await t._connect()
        except BaseException:
            await t._delete()
            raise
        return t

    async def _connect(self) -> None:
        cfg = self._http.cfg
        path = sandbox_path(self._sandbox_id, f"/pty/{self.pid}/ws")
        hdrs = headers(cfg)
        hdrs.pop("Accept", None)
        try:
            if cfg.socket:
                self._ws = await websockets.client.unix_connect(
                    cfg.socket, "ws://agentbox" + path, extra_headers=hdrs, max_size=None)
            else:
                url = cfg.base_url.replace("https://", "wss://", 1).replace("http://", "ws://", 1) + path
                self._ws = await websockets.client.connect(url, extra_headers=hdrs, max_size=None)
        except websockets.exceptions.InvalidStatusCode as e:
            raise error_from_status(e.status_code, f"opening the terminal's WebSocket {path}: {e}") from e
        except OSError as e:
            raise transport_error(cfg, e) from e

    async def write(self, data: Data) -> None:
        """Send keystrokes (str is UTF-8 encoded) to the terminal."""
        try:
            await self._ws.send(to_bytes(data))
        except websockets.exceptions.ConnectionClosed as e:
            raise AgentboxError("the terminal is closed", code="failed_precondition") from e

    async def read(self, timeout: Optional[float] = None) -> bytes:
        """Return the terminal's next output; b"" once it has exited.
        Raises TimeoutError when nothing came within ``timeout`` seconds."""
        while True:
            try:
                msg = await asyncio.wait_for(self._ws.recv(), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"no terminal output within {timeout} s") from None
            except websockets.exceptions.ConnectionClosed:
                return b""
            if isinstance(msg, bytes):
                return msg
            try:
                ev = json.loads(msg)
            except ValueError:
                continue
            if ev.get("type") == "exit":
                self.exit_code = ev.get("exit_code")
                return b""

    async def read_until(self, marker: Data, timeout: float = 30.0) -> bytes:
        """Read until the output so far contains ``marker``; return it all."""
        want, buf = to_bytes(marker), b""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while want not in buf:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"{want!r} did not appear on the terminal within {timeout} s; got {buf[-200:]!r}")
            chunk = await self.read(timeout=left)
            if not chunk:
                raise AgentboxError(f"the terminal exited before {want!r} appeared; got {buf[-200:]!r}",
                                    code="failed_precondition")
            buf += chunk
        return buf

    async def resize(self, cols: int, rows: int) -> None:
        """Change the terminal's size."""
        if cols <= 0 or rows <= 0:
            raise InvalidArgumentError(f"a terminal wants positive cols and rows, got {cols}x{rows}")
        await self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    async def close(self) -> None:
        """Close the connection and end the terminal's process."""
        if self._ws is not None:
            await self._ws.close()
        await self._delete()

    async def _delete(self) -> None:
        try:
            await self._http.request("DELETE", sandbox_path(self._sandbox_id, f"/pty/{self.pid}"))
        except NotFoundError:
            pass

    async def __aenter__(self) -> "AsyncPty":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class LoopThread:
    """An event loop on a daemon thread, for the blocking API's terminals."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agentbox-pty", daemon=True)
        self.thread.start()

    def run(self, coro: "Coroutine[Any, Any, T]") -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Pty:
    """A terminal in a sandbox (from ``Sandbox.pty``): ``write``, ``read``,
    ``read_until``, ``resize``, ``close``; ``exit_code`` once it exited."""

    def __init__(self, lt: LoopThread, inner: AsyncPty) -> None:
        self._lt = lt
        self._inner = inner
        self.pid = inner.pid
        self.id = inner.id

    @property
    def exit_code(self) -> Optional[int]:
        return self._inner.exit_code

    def write(self, data: Data) -> None:
        """Send keystrokes (str is UTF-8 encoded) to the terminal."""
        self._lt.run(self._inner.write(data))

    def read(self, timeout: Optional[float] = None) -> bytes:
        """Return the terminal's next output; b"" once it has exited."""
        return self._lt.run(self._inner.read(timeout))

    def read_until(self, marker: Data, timeout: float = 30.0) -> bytes:
        """Read until the output so far contains ``marker``; return it all."""
        return self._lt.run(self._inner.read_until(marker, timeout))

    def resize(self, cols: int, rows: int) -> None:
        """Change the terminal's size."""
        self._lt.run(self._inner.resize(cols, rows))

    def close(self) -> None:
        """Close the connection and end the terminal's process."""
        try:
            self._lt.run(self._inner.close())
            self._lt.run(self._inner._http.close())
        finally:
            self._lt.stop()

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_blocking(cfg: Config, timeout: Optional[float], sandbox_id: str, body: Dict[str, Any]) -> Pty:
    """Open a terminal for the blocking SDK (``Sandbox.pty``): an AsyncPty
    on an event loop thread of its own, behind a Pty."""
    lt = LoopThread()
    try:
        inner = lt.run(_start(cfg, timeout, sandbox_id, body))
    except BaseException:
        lt.stop()
        raise
    return Pty(lt, inner)


async def _start(cfg: Config, timeout: Optional[float], sandbox_id: str, body: Dict[str, Any]) -> AsyncPty:
    return await AsyncPty.start(AsyncHTTP(cfg, timeout), sandbox_id, body)
