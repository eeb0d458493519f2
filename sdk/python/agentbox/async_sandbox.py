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

from . import _archive, _build
from ._common import (Callback, Command, Data, StreamDecoder, create_body, exec_body, list_params,
                      sandbox_path, signal_name, to_bytes, preview_url, limits_body)
from ._http import AsyncHTTP
from ._pty import AsyncPty, pty_body
from .errors import InvalidArgumentError, NotFoundError, TimeoutError
from .models import (ExecResult, FileInfo, Health, PoolStatus, ProcessInfo, ProcessOutput, SandboxInfo, Snapshot,
                     Template)
from .sandbox import Files, Writable, _mode

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
        return Health.from_dict(await self._http.json("GET", "/v1/health"))

    async def pools(self) -> List[PoolStatus]:
        """The warm pools: ready sandboxes per template and tier, creates served."""
        d = await self._http.json("GET", "/v1/pools")
        return [PoolStatus.from_dict(p) for p in d.get("pools") or []]

    async def templates(self) -> List[Template]:
        """The templates sandboxes can be created from."""
        d = await self._http.json("GET", "/v1/templates")
        return [Template.from_dict(t) for t in d["templates"]]

    async def template(self, name: str) -> Template:
        """The newest version of one template."""
        if not name:
            raise InvalidArgumentError("a template name is required")
        return Template.from_dict(await self._http.json("GET", "/v1/templates/" + name))

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

    def _p(self, rest: str) -> str:
        return sandbox_path(self._id, rest)

    async def write(self, path: str, data: Writable, *, mode: Optional[int] = None,
                    user: Optional[str] = None) -> FileInfo:
        """Write ``data`` (str, bytes or a binary file object) to ``path``,
        creating parent directories."""
        q = Files._q(path, mode=_mode(mode), user=user)
        return FileInfo.from_dict(await self._http.json("PUT", self._p("/files"), params=q,
                                                        content=_content(data),
                                                        content_type="application/octet-stream"))

    async def read(self, path: str) -> bytes:
        """The bytes of a regular file."""
        return await self._http.request("GET", self._p("/files"), params=Files._q(path))

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The content of a text file."""
        return (await self.read(path)).decode(encoding)

    async def read_to(self, path: str, f: IO[bytes]) -> int:
        """Stream a file into the binary file object ``f``; return the bytes copied."""
        n = 0
        async with self._http.stream("GET", self._p("/files"), params=Files._q(path)) as resp:
            async for chunk in resp.aiter_bytes():
                f.write(chunk)
                n += len(chunk)
        return n

    async def list(self, path: str = ".", depth: int = 1) -> List[FileInfo]:
        """Entries of a directory, descending ``depth`` levels."""
        if depth < 1:
            raise InvalidArgumentError(f"depth must be 1 or more, got {depth}")
        d = await self._http.json("GET", self._p("/files/list"), params=Files._q(path, depth=depth))
        return [FileInfo.from_dict(e) for e in d.get("entries") or []]

    async def stat(self, path: str) -> FileInfo:
        """Describe one file (a final symlink is not followed)."""
        return FileInfo.from_dict(await self._http.json("GET", self._p("/files/stat"), params=Files._q(path)))

    async def exists(self, path: str) -> bool:
        """Whether anything exists at ``path``."""
        try:
            await self.stat(path)
            return True
        except NotFoundError:
            return False

    async def mkdir(self, path: str, *, mode: Optional[int] = None, user: Optional[str] = None) -> FileInfo:
        """Create a directory and its parents (mkdir -p)."""
        Files._q(path)
        body: Dict[str, Any] = {"path": path}
        if mode is not None:
            body["mode"] = _mode(mode)
        if user:
            body["user"] = user
        return FileInfo.from_dict(await self._http.json("POST", self._p("/files/mkdir"), json_body=body))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file or an empty directory; with ``recursive``, a tree."""
        await self._http.request("DELETE", self._p("/files"),
                                 params=Files._q(path, recursive="true" if recursive else None))

    async def rename(self, src: str, dst: str) -> None:
        """Move a file or directory inside the sandbox."""
        if not src or not dst:
            raise InvalidArgumentError("rename wants both a source and a destination path")
        await self._http.request("POST", self._p("/files/rename"), json_body={"from": src, "to": dst})


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

    def _p(self, rest: str = "") -> str:
        return sandbox_path(self._id, f"/processes/{self.pid}{rest}")

    async def wait(self, timeout: Optional[float] = None) -> ProcessInfo:
        """Wait for the process to end; TimeoutError if it still runs after ``timeout`` s."""
        q = {} if timeout is None else {"timeout_ms": str(max(1, int(timeout * 1000)))}
        self.info = ProcessInfo.from_dict(await self._http.json("POST", self._p("/wait"), params=q))
        if self.info.state == "running":
            raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
        return self.info

    async def output(self, stdout_offset: int = 0, stderr_offset: int = 0) -> ProcessOutput:
        """Output from the given offsets (default: all the daemon holds)."""
        q = {"stdout_offset": str(stdout_offset), "stderr_offset": str(stderr_offset)}
        return ProcessOutput.from_dict(await self._http.json("GET", self._p("/output"), params=q))

    async def send_stdin(self, data: Data, eof: bool = False) -> None:
        """Write to the process's stdin; ``eof=True`` closes it after."""
        q = {"eof": "true"} if eof else None
        await self._http.request("POST", self._p("/stdin"), params=q, content=to_bytes(data),
                                 content_type="application/octet-stream")

    async def close_stdin(self) -> None:
        """Close the process's stdin."""
        await self.send_stdin(b"", eof=True)

    async def signal(self, sig: Union[str, int], tree: bool = False) -> None:
        """Send a signal; with ``tree``, to every process it started too."""
        await self._http.request("POST", self._p("/signal"), json_body={"signal": signal_name(sig), "tree": tree})

    async def kill(self) -> None:
        """Kill the process and everything it started, wait for its end and
        drop it from the sandbox's list (later calls on it: NotFoundError)."""
        await self._http.request("DELETE", self._p())

    async def refresh(self) -> ProcessInfo:
        """Re-read the process's info (state, exit code)."""
        self.info = ProcessInfo.from_dict(await self._http.json("GET", self._p()))
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


class AsyncSandbox:
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
                info = SandboxInfo.from_dict(await http.json("POST", "/v1/sandboxes", json_body=body))
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
            info = SandboxInfo.from_dict(await http.json("GET", sandbox_path(sandbox_id)))
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
            d = await http.json("GET", "/v1/sandboxes", params=list_params(metadata, state))
        finally:
            await http.close()
        return [SandboxInfo.from_dict(s) for s in d.get("sandboxes") or []]

    async def info(self) -> SandboxInfo:
        """The sandbox as the daemon sees it now."""
        self._info = SandboxInfo.from_dict(await self._http.json("GET", sandbox_path(self.id)))
        return self._info

    async def set_ttl(self, seconds: Optional[int]) -> SandboxInfo:
        """Expire the sandbox ``seconds`` from now; None or -1 removes the TTL."""
        secs = -1 if seconds is None or seconds < 0 else int(seconds)
        self._info = SandboxInfo.from_dict(await self._http.json("PATCH", sandbox_path(self.id),
                                                                 json_body={"ttl_seconds": secs}))
        return self._info

    async def destroy(self) -> None:
        """Destroy the sandbox and everything in it (no error if already gone)."""
        try:
            await self._http.request("DELETE", sandbox_path(self.id))
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
            d = await self._http.json("POST", sandbox_path(self.id, "/exec"), json_body=body)
            return ExecResult.from_dict(d)
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
        body = exec_body(cmd, env, cwd, user, timeout, None)
        if tag:
            body["tag"] = tag
        d = await self._http.json("POST", sandbox_path(self.id, "/processes"), json_body=body)
        return AsyncProcess(self._http, self.id, ProcessInfo.from_dict(d))

    async def processes(self) -> List[ProcessInfo]:
        """The background processes the sandbox's agent knows of."""
        d = await self._http.json("GET", sandbox_path(self.id, "/processes"))
        return [ProcessInfo.from_dict(x) for x in d.get("processes") or []]

    async def process(self, ref: Union[int, str]) -> AsyncProcess:
        """Attach to a background process by pid or tag."""
        d = await self._http.json("GET", sandbox_path(self.id, f"/processes/{ref}"))
        return AsyncProcess(self._http, self.id, ProcessInfo.from_dict(d))

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
                await self._http.request("PUT", sandbox_path(self.id, "/files/archive"),
                                         params=Files._q(remote_path), content=_achunks(f),
                                         content_type="application/x-tar")
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
                                         params=Files._q(remote_path)) as resp:
                async for chunk in resp.aiter_bytes():
                    f.write(chunk)
            f.seek(0)
            await asyncio.to_thread(_archive.extract, f, local_path)  # type: ignore[arg-type]

    async def pause(self, to_disk: bool = False) -> SandboxInfo:
        """Freeze every process in the sandbox; ``to_disk=True`` (gvisor)
        checkpoints processes and memory to disk."""
        body = {"to_disk": True} if to_disk else None
        self._info = SandboxInfo.from_dict(await self._http.json("POST", sandbox_path(self.id, "/pause"), json_body=body))
        return self._info

    async def resume(self) -> SandboxInfo:
        """Thaw a paused sandbox."""
        self._info = SandboxInfo.from_dict(await self._http.json("POST", sandbox_path(self.id, "/resume")))
        return self._info

    async def snapshot(self, name: Optional[str] = None, memory: bool = False) -> Snapshot:
        """Save the sandbox's state (``memory=True``, gvisor: processes too)."""
        body: Dict[str, Any] = {"name": name} if name else {}
        if memory:
            body["memory"] = True
        d = await self._http.json("POST", sandbox_path(self.id, "/snapshots"), json_body=body)
        return Snapshot.from_dict(d)

    async def reset(self, snapshot: Optional[str] = None) -> SandboxInfo:
        """Put the sandbox's files back to where it started (or to
        ``snapshot``), in place; running processes are ended."""
        body = {"snapshot": snapshot} if snapshot else {}
        self._info = SandboxInfo.from_dict(await self._http.json("POST", sandbox_path(self.id, "/reset"),
                                                             json_body=body))
        return self._info

    async def fork(self, count: int = 1, memory: bool = False) -> List["AsyncSandbox"]:
        """Make ``count`` copies of the sandbox (``memory=True``, gvisor:
        each goes on running its processes)."""
        if count < 1:
            raise InvalidArgumentError(f"count must be 1 or more, got {count}")
        body: Dict[str, Any] = {"count": count}
        if memory:
            body["memory"] = True
        d = await self._http.json("POST", sandbox_path(self.id, "/fork"), json_body=body)
        return [AsyncSandbox(SandboxInfo.from_dict(s), self._http.clone()) for s in d.get("sandboxes") or []]

    async def url(self, port: int) -> str:
        """The preview URL of ``port`` served inside the sandbox; see
        ``Sandbox.url``."""
        return preview_url(self.id, (await self.info()).network, port)

    async def set_egress(self, egress: str, allow: Optional[List[str]] = None,
                         deny: Optional[List[str]] = None, *, max_connections: int = 0,
                         bandwidth_mbit: int = 0) -> SandboxInfo:
        """Replace the sandbox's egress policy and limits; see ``Sandbox.set_egress``."""
        body: Dict[str, Any] = {"egress": egress, "allow": list(allow or []), "deny": list(deny or [])}
        body.update(limits_body(max_connections, bandwidth_mbit))
        self._info = SandboxInfo.from_dict(await self._http.json("POST", sandbox_path(self.id, "/egress"),
                                                                 json_body=body))
        return self._info

    async def egress_log(self) -> List[Dict[str, Any]]:
        """The sandbox's egress log, oldest first; see ``Sandbox.egress_log``."""
        return list((await self._http.json("GET", sandbox_path(self.id, "/egress/log"))).get("entries") or [])
