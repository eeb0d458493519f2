"""The asyncio SDK: ``AsyncSandbox`` and friends, the same surface as the
blocking one with ``async``/``await``.

::

    async with AsyncSandbox.create(template="base") as sbx:
        r = await sbx.exec("echo hi")
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import tempfile
from typing import IO, Any, AsyncIterator, Awaitable, Dict, Generator, List, Optional, Union

from . import _archive, _build, _calls as calls, _events
from ._calls import file_query
from ._common import (Callback, Command, Data, StreamDecoder, create_body, exec_body, preview_url, sandbox_path,
                      to_bytes)
from ._http import AsyncHTTP
from .code import AsyncCodeInterpreter
from ._pty import AsyncPty, pty_body
from .errors import NotFoundError, TimeoutError
from .models import (ExecResult, FileInfo, Health, PoolStatus, ProcessInfo, ProcessOutput, SandboxInfo, Snapshot,
                     Template)
from .sandbox import Writable

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncFiles", "AsyncProcess"]


async def _achunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    for chunk in _archive.chunks(f):
        yield chunk


def _content(data: Writable) -> Any:
    if hasattr(data, "read"):
        return _achunks(data)  # type: ignore[arg-type]
    return to_bytes(data)  # type: ignore[arg-type]


class AsyncClient:
    """Daemon-wide calls (health, templates), asynchronously."""

    def __init__(self, api_key: Optional[str] = None, base_url: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        self._http = AsyncHTTP.open(api_key, base_url, request_timeout)

    async def health(self) -> Health:
        """The daemon's status."""
        return await self._http.call(calls.health())

    async def pools(self) -> List[PoolStatus]:
        """The warm pools: ready sandboxes per template and tier, creates served."""
        return await self._http.call(calls.pools())

    async def events(self, types: Optional[List[str]] = None, sandbox: Optional[str] = None,
                     tenant: Optional[str] = None) -> "_events.AsyncEventStream":
        """Lifecycle events as they happen: ``st = await client.events()``,
        subscribed when it returns, then ``async for ev in st``; close it
        with ``await st.aclose()`` or ``async with``. See ``Client.events``."""
        return await _events.AsyncEventStream(self._http, _events.params(types, sandbox, tenant))._open()

    async def templates(self) -> List[Template]:
        """The templates sandboxes can be created from."""
        return await self._http.call(calls.templates())

    async def template(self, name: str) -> Template:
        """The newest version of one template."""
        return await self._http.call(calls.template(name))

    async def build_template(self, name: str, spec: Union[str, bytes], *, context_dir: Optional[str] = None,
                             on_event: Optional[Any] = None) -> Template:
        """As ``Client.build_template``; ``on_event`` is called (not awaited)
        with each progress event."""
        data, ctx = _build.prepare(name, spec, context_dir)
        ctype, body = _build.multipart(data, ctx)
        try:
            async with self._http.stream("POST", "/v1/templates/build", params={"name": name},
                                         content=_build.aiterate(body), content_type=ctype) as resp:
                return Template.from_dict(await _build.afollow(resp.aiter_lines(), on_event))
        finally:
            if ctx is not None:
                ctx.close()

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncFiles:
    """Files inside a sandbox (``sbx.files``), asynchronously; see ``Files``."""

    def __init__(self, http: AsyncHTTP, sandbox_id: str) -> None:
        self._http = http
        self._id = sandbox_id

    async def write(self, path: str, data: Writable, *, mode: "Optional[int | str]" = None,
                    user: Optional[str] = None) -> FileInfo:
        """Write ``data`` (str, bytes or a binary file object) to ``path``,
        creating parent directories."""
        return await self._http.call(calls.file_write(self._id, path, data, mode, user, _content))

    async def read(self, path: str) -> bytes:
        """The bytes of a regular file."""
        return await self._http.call(calls.file_read(self._id, path))

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The content of a text file."""
        return (await self.read(path)).decode(encoding)

    async def read_to(self, path: str, f: IO[bytes]) -> int:
        """Stream a file into the binary file object ``f``; return the bytes copied."""
        n = 0
        async with self._http.stream("GET", sandbox_path(self._id, "/files"), params=file_query(path)) as resp:
            async for chunk in resp.aiter_bytes():
                f.write(chunk)
                n += len(chunk)
        return n

    async def list(self, path: str = ".", depth: int = 1) -> List[FileInfo]:
        """Entries of a directory, descending ``depth`` levels."""
        return await self._http.call(calls.file_list(self._id, path, depth))

    async def stat(self, path: str) -> FileInfo:
        """Describe one file (a final symlink is not followed)."""
        return await self._http.call(calls.file_stat(self._id, path))

    async def exists(self, path: str) -> bool:
        """Whether anything exists at ``path``."""
        try:
            await self.stat(path)
            return True
        except NotFoundError:
            return False

    async def mkdir(self, path: str, *, mode: "Optional[int | str]" = None, user: Optional[str] = None) -> FileInfo:
        """Create a directory and its parents (mkdir -p)."""
        return await self._http.call(calls.file_mkdir(self._id, path, mode, user))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file or an empty directory; with ``recursive``, a tree."""
        await self._http.call(calls.file_remove(self._id, path, recursive))

    async def rename(self, src: str, dst: str) -> None:
        """Move a file or directory inside the sandbox."""
        await self._http.call(calls.file_rename(self._id, src, dst))


class AsyncProcess:
    """A background process started with ``AsyncSandbox.start``; see ``Process``."""

    def __init__(self, http: AsyncHTTP, sandbox_id: str, info: ProcessInfo) -> None:
        self._http = http
        self._id = sandbox_id
        self.info = info

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def tag(self) -> str:
        return self.info.tag

    @property
    def exit_code(self) -> Optional[int]:
        return self.info.exit_code

    async def wait(self, timeout: Optional[float] = None) -> ProcessInfo:
        """Wait for the process to end; TimeoutError if it still runs after ``timeout`` s."""
        self.info = await self._http.call(calls.proc_wait(self._id, self.pid, timeout))
        if self.info.state == "running":
            raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
        return self.info

    async def output(self, stdout_offset: int = 0, stderr_offset: int = 0) -> ProcessOutput:
        """Output from the given offsets (default: all the daemon holds)."""
        return await self._http.call(calls.proc_output(self._id, self.pid, stdout_offset, stderr_offset))

    async def send_stdin(self, data: Data, eof: bool = False) -> None:
        """Write to the process's stdin; ``eof=True`` closes it after."""
        await self._http.call(calls.proc_stdin(self._id, self.pid, data, eof))

    async def close_stdin(self) -> None:
        """Close the process's stdin."""
        await self.send_stdin(b"", eof=True)

    async def signal(self, sig: Union[str, int], tree: bool = False) -> None:
        """Send a signal; with ``tree``, to every process it started too."""
        await self._http.call(calls.proc_signal(self._id, self.pid, sig, tree))

    async def kill(self) -> None:
        """Kill the process and everything it started, wait for its end and
        drop it from the sandbox's list (later calls on it: NotFoundError)."""
        await self._http.call(calls.proc_kill(self._id, self.pid))

    async def refresh(self) -> ProcessInfo:
        """Re-read the process's info (state, exit code)."""
        self.info = await self._http.call(calls.proc_info(self._id, self.pid))
        return self.info


class _Creating:
    """What ``AsyncSandbox.create`` returns: await it for the sandbox, or
    use it in ``async with`` to have the sandbox destroyed on exit."""

    def __init__(self, coro: Awaitable["AsyncSandbox"]) -> None:
        self._coro = coro
        self._sbx: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, "AsyncSandbox"]:
        return self._coro.__await__()

    async def __aenter__(self) -> "AsyncSandbox":
        self._sbx = await self._coro
        return self._sbx

    async def __aexit__(self, *exc: Any) -> None:
        if self._sbx is not None:
            await self._sbx.__aexit__(*exc)


class AsyncSandbox(AsyncCodeInterpreter):
    """A disposable Linux sandbox, asynchronously; see ``Sandbox``.

    ::

        async with AsyncSandbox.create(template="base") as sbx:
            r = await sbx.exec("echo hi")
        sbx = await AsyncSandbox.create()   # also works; then await sbx.destroy()
    """

    def __init__(self, info: SandboxInfo, http: AsyncHTTP) -> None:
        self._info = info
        self._http = http
        self.files = AsyncFiles(http, info.id)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r})"

    @property
    def id(self) -> str:
        """The sandbox's id."""
        return self._info.id

    @classmethod
    def create(cls, template: Optional[str] = None, *, ttl_seconds: Optional[int] = None,
               isolation: Optional[str] = None, cpu: Optional[float] = None,
               memory_mb: Optional[int] = None, disk_mb: Optional[int] = None,
               pids: Optional[int] = None, env: Optional[Dict[str, str]] = None,
               metadata: Optional[Dict[str, str]] = None, network: Any = None,
               snapshot: Optional[str] = None, on_timeout: Optional[str] = None,
               auto_resume: Optional[bool] = None, idle_timeout: Optional[int] = None,
               api_key: Optional[str] = None,
               base_url: Optional[str] = None, request_timeout: Optional[float] = None) -> _Creating:
        """Create a sandbox (arguments as ``Sandbox.create``). Await the
        result, or use it directly in ``async with``."""
        body = create_body(template, ttl_seconds, isolation, cpu, memory_mb, disk_mb, env, metadata,
                           network, snapshot, pids, on_timeout, auto_resume, idle_timeout)

        async def make() -> AsyncSandbox:
            http = AsyncHTTP.open(api_key, base_url, request_timeout)
            try:
                info = await http.call(calls.create(body))
            except BaseException:
                await http.close()
                raise
            return cls(info, http)

        return _Creating(make())

    @classmethod
    async def connect(cls, sandbox_id: str, *, api_key: Optional[str] = None,
                      base_url: Optional[str] = None, request_timeout: Optional[float] = None) -> "AsyncSandbox":
        """Attach to an existing sandbox."""
        http = AsyncHTTP.open(api_key, base_url, request_timeout)
        try:
            info = await http.call(calls.info(sandbox_id))
        except BaseException:
            await http.close()
            raise
        return cls(info, http)

    @classmethod
    async def list(cls, metadata: Optional[Dict[str, str]] = None, *, state: Optional[str] = None,
                   api_key: Optional[str] = None, base_url: Optional[str] = None) -> List[SandboxInfo]:
        """Sandboxes the key can see, filtered by ``metadata`` and ``state``."""
        http = AsyncHTTP.open(api_key, base_url, None)
        try:
            return await http.call(calls.sandboxes(metadata, state))
        finally:
            await http.close()

    async def info(self) -> SandboxInfo:
        """The sandbox as the daemon sees it now."""
        self._info = await self._http.call(calls.info(self.id))
        return self._info

    async def set_ttl(self, seconds: Optional[int]) -> SandboxInfo:
        """Expire the sandbox ``seconds`` from now; None or -1 removes the TTL."""
        self._info = await self._http.call(calls.set_ttl(self.id, seconds))
        return self._info

    async def destroy(self) -> None:
        """Destroy the sandbox and everything in it (no error if already gone)."""
        try:
            await self._http.call(calls.destroy(self.id))
        except NotFoundError:
            pass

    async def close(self) -> None:
        """Release the connection (the sandbox keeps running)."""
        await self._http.close()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.destroy()
        finally:
            await self.close()

    async def exec(self, cmd: Command, *, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                   user: Optional[str] = None, timeout: Optional[float] = None, stdin: Optional[Data] = None,
                   on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None) -> ExecResult:
        """Run a command to its end; see ``Sandbox.exec``. Callbacks may be
        plain functions or coroutine functions (awaited in order)."""
        body = exec_body(cmd, env, cwd, user, timeout, stdin)
        if on_stdout is None and on_stderr is None:
            return await self._http.call(calls.exec_(self.id, body))
        dec = StreamDecoder(on_stdout, on_stderr)
        line = json.dumps(body).encode() + b"\n"
        async with self._http.stream("POST", sandbox_path(self.id, "/exec/stream"), content=line,
                                     content_type="application/x-ndjson") as resp:
            async for chunk in resp.aiter_raw():
                for r in dec.feed(chunk):
                    if inspect.isawaitable(r):
                        await r
                if dec.result is not None:
                    break
        return dec.finish()

    async def start(self, cmd: Command, *, tag: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                    cwd: Optional[str] = None, user: Optional[str] = None,
                    timeout: Optional[float] = None) -> AsyncProcess:
        """Start a background process and return at once."""
        info = await self._http.call(calls.start(self.id, cmd, tag, env, cwd, user, timeout))
        return AsyncProcess(self._http, self.id, info)

    async def processes(self) -> List[ProcessInfo]:
        """The background processes the sandbox's agent knows of."""
        return await self._http.call(calls.processes(self.id))

    async def process(self, ref: Union[int, str]) -> AsyncProcess:
        """Attach to a background process by pid or tag."""
        return AsyncProcess(self._http, self.id, await self._http.call(calls.process(self.id, ref)))

    async def pty(self, cols: int = 80, rows: int = 24, *, cmd: Optional[Command] = None,
                  env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                  user: Optional[str] = None) -> AsyncPty:
        """Open an interactive terminal; see ``Sandbox.pty``."""
        return await AsyncPty.start(self._http, self.id, pty_body(cols, rows, cmd, env, cwd, user))

    async def upload(self, local_path: str, remote_path: str) -> None:
        """Copy a local file or directory tree into the sandbox."""
        if os.path.isdir(local_path):
            f = await asyncio.to_thread(_archive.tar_dir, local_path)
            try:
                await self._http.call(calls.upload_archive(self.id, remote_path, _achunks(f)))
            finally:
                f.close()
            return
        with open(local_path, "rb") as lf:
            await self.files.write(remote_path, lf, mode=os.stat(local_path).st_mode & 0o777)

    async def download(self, remote_path: str, local_path: str) -> None:
        """Copy a file or directory tree from the sandbox to ``local_path``."""
        if not (await self.files.stat(remote_path)).is_dir:
            os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
            with open(local_path, "wb") as out:
                await self.files.read_to(remote_path, out)
            return
        with tempfile.SpooledTemporaryFile(max_size=_archive.SPOOL) as f:
            async with self._http.stream("GET", sandbox_path(self.id, "/files/archive"),
                                         params=file_query(remote_path)) as resp:
                async for chunk in resp.aiter_bytes():
                    f.write(chunk)
            f.seek(0)
            await asyncio.to_thread(_archive.extract, f, local_path)  # type: ignore[arg-type]

    async def pause(self, to_disk: bool = False) -> SandboxInfo:
        """Freeze every process in the sandbox; ``to_disk=True`` (gvisor)
        checkpoints processes and memory to disk."""
        self._info = await self._http.call(calls.pause(self.id, to_disk))
        return self._info

    async def resume(self) -> SandboxInfo:
        """Thaw a paused sandbox."""
        self._info = await self._http.call(calls.resume(self.id))
        return self._info

    async def snapshot(self, name: Optional[str] = None, memory: bool = False) -> Snapshot:
        """Save the sandbox's state (``memory=True``, gvisor: processes too)."""
        return await self._http.call(calls.snapshot(self.id, name, memory))

    async def reset(self, snapshot: Optional[str] = None, *, template: bool = False) -> SandboxInfo:
        """Put the sandbox's files back to where it started (or to
        ``snapshot``; or with ``template=True`` to its template alone,
        leaving any snapshot), in place; running processes are ended."""
        self._info = await self._http.call(calls.reset(self.id, snapshot, template))
        return self._info

    async def fork(self, count: int = 1, memory: bool = False) -> List["AsyncSandbox"]:
        """Make ``count`` copies of the sandbox (``memory=True``, gvisor:
        each goes on running its processes)."""
        infos = await self._http.call(calls.fork(self.id, count, memory))
        return [AsyncSandbox(s, self._http.clone()) for s in infos]

    async def url(self, port: int) -> str:
        """The preview URL of ``port`` served inside the sandbox; see
        ``Sandbox.url``."""
        return preview_url(self.id, (await self.info()).network, port)

    async def set_egress(self, egress: str, allow: Optional[List[str]] = None,
                         deny: Optional[List[str]] = None, *, max_connections: int = 0,
                         bandwidth_mbit: int = 0) -> SandboxInfo:
        """Replace the sandbox's egress policy and limits; see ``Sandbox.set_egress``."""
        self._info = await self._http.call(calls.set_egress(self.id, egress, allow, deny, max_connections,
                                                            bandwidth_mbit))
        return self._info

    async def egress_log(self) -> List[Dict[str, Any]]:
        """The sandbox's egress log, oldest first; see ``Sandbox.egress_log``."""
        return await self._http.call(calls.egress_log(self.id))

    async def metrics(self) -> List[Dict[str, Any]]:
        """The sandbox's resource use over the last hour; see ``Sandbox.metrics``."""
        return await self._http.call(calls.metrics(self.id))
