"""The asyncio SDK: ``AsyncSandbox`` and friends, the same surface as the
blocking one with ``async``/``await``.

::

    async with AsyncSandbox.create(template="base") as sbx:
        r = await sbx.exec("echo hi")

This file is the one implementation of both SDKs: scripts/gen_sync.py
writes the blocking one, sandbox.py, from it (``async``/``await`` dropped,
``AsyncX`` names made ``X``, ``if _ASYNC:`` blocks resolved, the
``async_doc`` docstrings of the asyncio twins dropped). Edit this file,
then run ``python3 sdk/python/scripts/gen_sync.py``; tests/test_surface.py
fails while sandbox.py is stale. The docstrings here are the blocking
SDK's; ``@async_doc`` gives an asyncio method its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _archive, _build, _calls as calls, _events, _pty
from ._calls import file_query
from ._common import (Callback, Command, Data, StreamDecoder, create_body, exec_body, preview_url, sandbox_path,
                      to_bytes)
from ._http import AsyncHTTP
from ._pty import AsyncPty, pty_body
from . import desktop
from .code import CodeContext, ContextRef, Execution, Handler, _ctx_id, _Decoder, _run_body
from .desktop import ActionsResult, DesktopInfo, Window
from .errors import NotFoundError, TimeoutError
from .models import (ExecResult, FileInfo, FleetNode, Health, NodeStatus, PoolStatus, ProcessInfo, ProcessOutput, PushResult,
                     SandboxInfo, SandboxPage, Snapshot, Template)

# True in async_sandbox.py, False in sandbox.py: scripts/gen_sync.py keeps
# the blocking branch of each ``if _ASYNC:``.
_ASYNC = True

if _ASYNC:
    import asyncio
    from typing import Awaitable, Generator

    from ._common import async_doc, settle

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncFiles", "AsyncProcess", "AsyncDesktop"]
if not _ASYNC:
    __all__.append("Pty")

Writable = Union[str, bytes, bytearray, memoryview, IO[bytes]]
_T = TypeVar("_T")


def write_content(data: Writable) -> Any:
    """Bytes for str/bytes; a chunk iterator for a binary file object."""
    if hasattr(data, "read"):
        return _archive.chunks(data)  # type: ignore[arg-type]
    return to_bytes(data)  # type: ignore[arg-type]


async def _off_loop(fn: Callable[..., _T], *args: Any) -> _T:
    """Run blocking local file work (tar, extract): in a thread for the
    asyncio SDK, in place for the blocking one."""
    if _ASYNC:
        return await asyncio.to_thread(fn, *args)
    else:
        return fn(*args)


@async_doc("""Daemon-wide calls (health, templates), asynchronously.""")
class AsyncClient:
    """Daemon-wide calls (health, templates) and the connection the
    ``Sandbox`` class methods use. Arguments as for ``Sandbox.create``."""

    def __init__(self, api_key: Optional[str] = None, base_url: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        self._http = AsyncHTTP.open(api_key, base_url, request_timeout)

    async def health(self) -> Health:
        """The daemon's status."""
        return await self._http.call(calls.health())

    async def pools(self) -> List[PoolStatus]:
        """The warm pools: ready sandboxes per template and tier, creates served."""
        return await self._http.call(calls.pools())

    @async_doc("""Lifecycle events as they happen: ``st = await client.events()``,
        subscribed when it returns, then ``async for ev in st``; close it
        with ``await st.aclose()`` or ``async with``. See ``Client.events``.""")
    async def events(self, types: Optional[List[str]] = None, sandbox: Optional[str] = None,
                     tenant: Optional[str] = None) -> "_events.AsyncEventStream":
        """Lifecycle events as they happen, as dicts with ``seq``, ``time``,
        ``type`` (created, forked, paused, resumed, stopped, snapshotted,
        reset, expired, destroyed, oom, failed, quota_rejected),
        ``sandbox``, ``tenant``, ``template``, ``isolation`` and ``detail``.
        The stream is subscribed when this returns and runs until closed
        (``close()``, or use it in ``with``); a tenant's key sees its own
        tenant's events only."""
        if _ASYNC:
            return await _events.AsyncEventStream(self._http, _events.params(types, sandbox, tenant))._open()
        else:
            return _events.EventStream(self._http, _events.params(types, sandbox, tenant))

    async def templates(self) -> List[Template]:
        """The templates sandboxes can be created from."""
        return await self._http.call(calls.templates())

    async def template(self, name: str) -> Template:
        """The newest version of one template."""
        return await self._http.call(calls.template(name))

    async def remove_template(self, name: str) -> None:
        """Delete every version of a template: a tenant's own, or any with
        an admin key (``DELETE /v1/templates/{name}``). ``ConflictError``
        while a sandbox or snapshot uses it."""
        await self._http.call(calls.remove_template(name))

    async def push_template(self, name: str, ref: str) -> PushResult:
        """Push the newest version of template ``name`` to an OCI registry
        as an image any OCI tool reads (``POST /v1/templates/{name}/push``;
        docs/cluster.md): ``ref`` is ``HOST[:PORT]/REPO[:TAG]``, the
        registry's host always written out. Returns the ref and the
        manifest's digest; pushing the same version again gives the same
        digest. Registry credentials are the daemon's (docs/config.md)."""
        return await self._http.call(calls.push_template(name, ref))

    async def pull_template(self, ref: str, name: Optional[str] = None) -> Template:
        """Pull the OCI image at ``ref`` (``HOST[:PORT]/REPO[:TAG|@DIGEST]``)
        as a new version of template ``name`` (default: the repository's
        last component) and return it (``POST /v1/templates/pull``)."""
        return await self._http.call(calls.pull_template(ref, name))

    async def push_snapshot(self, snapshot: str, ref: str) -> PushResult:
        """Push a snapshot's files (``snapshot``: its id or name) to ``ref``
        as an OCI artifact (``POST /v1/snapshots/{ref}/push``); another node
        pulls it with ``pull_snapshot``. Returns the ref and the digest."""
        return await self._http.call(calls.push_snapshot(snapshot, ref))

    async def pull_snapshot(self, ref: str, name: Optional[str] = None) -> Snapshot:
        """Pull a pushed snapshot from ``ref`` into a new snapshot here,
        named ``name`` (None: no name), pulling its template too when it is
        missing (``POST /v1/snapshots/pull``); start sandboxes from it with
        ``Sandbox.create(snapshot=...)``."""
        return await self._http.call(calls.pull_snapshot(ref, name))

    async def fleet_nodes(self) -> List[FleetNode]:
        """A fleet gateway's nodes (``GET /v1/fleet/nodes``, an admin key):
        id, url, available, last_error, last_poll, in_flight and the node's
        last ``NodeStatus``. A daemon that is not a gateway raises
        ``NotSupportedError``."""
        return await self._http.call(calls.fleet_nodes())

    async def node_status(self) -> NodeStatus:
        """This daemon's status as a fleet gateway polls it (``GET /v1/node``,
        an admin key): node_id, tiers, sandboxes, CPUs, load, memory and
        ready templates."""
        return await self._http.call(calls.node_status())

    @async_doc("""As ``Client.build_template``; ``on_event`` is called (not awaited)
        with each progress event.""")
    async def build_template(self, name: str, spec: Union[str, bytes], *, context_dir: Optional[str] = None,
                             on_event: Optional[Any] = None) -> Template:
        """Build a new version of template ``name`` from a YAML build spec
        (docs/templates.md): with a tenant's key the template is the
        tenant's own, within its disk quota; with an admin key it is
        public. ``context_dir`` is the directory copy steps read from;
        ``on_event`` gets each progress event as a dict (``type`` step,
        output, step_done). Returns the template; a failing step raises
        InvalidArgumentError naming the step, its exit code and its last
        output, and leaves no template version."""
        data, ctx = _build.prepare(name, spec, context_dir)
        ctype, body = _build.multipart(data, ctx)
        try:
            async with self._http.stream("POST", "/v1/templates/build", params={"name": name},
                                         content=body, content_type=ctype) as resp:
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


@async_doc("""Files inside a sandbox (``sbx.files``), asynchronously; see ``Files``.""")
class AsyncFiles:
    """Files inside a sandbox (``sbx.files``). Paths are paths inside the
    sandbox; relative ones are taken from the sandbox's working directory by
    the guest."""

    def __init__(self, http: AsyncHTTP, sandbox_id: str) -> None:
        self._http = http
        self._id = sandbox_id

    @async_doc("""Write ``data`` (str, bytes or a binary file object) to ``path``,
        creating parent directories.""")
    async def write(self, path: str, data: Writable, *, mode: "Optional[int | str]" = None,
                    user: Optional[str] = None) -> FileInfo:
        """Write ``data`` (str, bytes or a binary file object, streamed) to
        ``path``, creating parent directories. ``mode`` e.g. 0o755 or "0755"."""
        return await self._http.call(calls.file_write(self._id, path, data, mode, user, write_content))

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

    @async_doc("""Entries of a directory, descending ``depth`` levels.""")
    async def list(self, path: str = ".", depth: int = 1) -> List[FileInfo]:
        """Entries of a directory, descending ``depth`` levels (1: its own entries)."""
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


@async_doc("""A sandbox's desktop (``sbx.desktop``), asynchronously; see ``Desktop``.""")
class AsyncDesktop:
    """A sandbox's desktop for computer-use agents (``sbx.desktop``): an X
    display (the ``desktop`` template) driven by screenshots and mouse and
    keyboard actions, with a live view. Coordinates are screen pixels.
    See docs/desktop.md."""

    def __init__(self, http: AsyncHTTP, sandbox_id: str) -> None:
        self._http = http
        self._id = sandbox_id

    def _path(self, rest: str = "") -> str:
        return sandbox_path(self._id, "/desktop" + rest)

    async def start(self, width: Optional[int] = None, height: Optional[int] = None,
                    dpi: Optional[int] = None) -> DesktopInfo:
        """Start the display (default 1024x768 at 96 dpi) and return once it
        is ready; a no-op when it runs at that size."""
        return DesktopInfo.from_dict(
            await self._http.json("POST", self._path(), json_body=desktop.start_body(width, height, dpi)))

    async def status(self) -> DesktopInfo:
        """The display's state ("stopped" when it never started)."""
        return DesktopInfo.from_dict(await self._http.json("GET", self._path()))

    async def stop(self) -> None:
        """Stop the display and the programs launched on it."""
        await self._http.request("DELETE", self._path())

    async def screenshot(self, format: str = "png", *, quality: Optional[int] = None,
                         scale: "Union[None, str, float, Tuple[int, int]]" = None,
                         region: Optional[Sequence[int]] = None) -> bytes:
        """The screen as PNG (or ``format="jpeg"``, ``quality`` 1-100) bytes;
        ``scale`` (w, h), "WxH" or a factor like 0.5; ``region`` (x, y, w, h)."""
        return await self._http.request("GET", self._path("/screenshot"),
                                        params=desktop.screenshot_params(format, quality, scale, region))

    async def actions(self, actions: Sequence[Dict[str, Any]],
                      screenshot: "desktop.ScreenshotSpec" = False) -> ActionsResult:
        """Run actions in order, e.g. ``[{"type": "click", "x": 10, "y": 20},
        {"type": "type", "text": "hi"}]`` (move, click, mouse_down, mouse_up,
        drag, scroll, type, key, wait; see docs/desktop.md); the first
        failing one stops the batch. ``screenshot=True`` (or the options of
        ``screenshot`` as a dict) adds an image taken after the last one."""
        body = desktop.actions_body(actions, screenshot)
        return ActionsResult.from_dict(await self._http.json("POST", self._path("/actions"), json_body=body))

    async def _act(self, action: Dict[str, Any]) -> None:
        await self.actions([action])

    async def click(self, x: Optional[int] = None, y: Optional[int] = None, button: str = "left",
                    double: bool = False) -> None:
        """Click ``button`` (left, right, middle, back, forward) at x, y (or
        where the pointer is); ``double`` clicks twice."""
        await self._act(desktop.click_action(x, y, button, double))

    async def move(self, x: int, y: int) -> None:
        """Move the pointer to x, y."""
        await self._act({"type": "move", "x": int(x), "y": int(y)})

    async def drag(self, path: Sequence["desktop.Point"]) -> None:
        """Drag with the left button along ``path``, two or more (x, y)."""
        await self._act({"type": "drag", "path": [desktop.point(p) for p in path]})

    async def scroll(self, x: int, y: int, dx: int = 0, dy: int = 0) -> None:
        """Scroll ``dx``, ``dy`` notches at x, y (positive ``dy`` scrolls down,
        positive ``dx`` right)."""
        await self._act({"type": "scroll", "x": int(x), "y": int(y), "dx": int(dx), "dy": int(dy)})

    async def type(self, text: str) -> None:
        """Type ``text`` (any Unicode) into the focused window."""
        await self._act({"type": "type", "text": text})

    async def press(self, keys: str) -> None:
        """Press a key or a chord: "Return", "ctrl+l", "ctrl+shift+t"."""
        await self._act({"type": "key", "keys": keys})

    async def cursor(self) -> Tuple[int, int]:
        """The pointer's position (x, y)."""
        d = await self._http.json("GET", self._path("/cursor"))
        return int(d.get("x", 0)), int(d.get("y", 0))

    async def windows(self) -> List[Window]:
        """The top-level windows: id, title, app, geometry, focused."""
        return desktop.windows_of(await self._http.json("GET", self._path("/windows")))

    async def launch(self, app: "Union[str, Sequence[str]]", *, env: Optional[Dict[str, str]] = None,
                     cwd: Optional[str] = None) -> ProcessInfo:
        """Start a program on the display: a known app ("chromium",
        "terminal") or an argv list; a background process."""
        body = desktop.launch_body(app, env, cwd)
        return ProcessInfo.from_dict(await self._http.json("POST", self._path("/launch"), json_body=body))

    async def open(self, url: str) -> ProcessInfo:
        """Open ``url`` in Chromium on the display."""
        return ProcessInfo.from_dict(await self._http.json("POST", self._path("/open"), json_body={"url": url}))

    async def stream_url(self, view_only: bool = True) -> str:
        """The live view's URL (noVNC, with the sandbox's token); view-only
        unless ``view_only=False``. Whoever holds it can watch (or drive)."""
        d = await self._http.json("GET", self._path("/stream"),
                                  params={"view_only": "true" if view_only else "false"})
        return d["url"]


@async_doc("""A background process started with ``AsyncSandbox.start``; see ``Process``.""")
class AsyncProcess:
    """A background process started with ``Sandbox.start``. Its fields are
    those of ``info`` as last seen (``pid``, ``tag``, ``state``, ``exit_code``)."""

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

    @async_doc("""Wait for the process to end; TimeoutError if it still runs after ``timeout`` s.""")
    async def wait(self, timeout: Optional[float] = None) -> ProcessInfo:
        """Wait for the process to end and return its final info. Raises
        TimeoutError when it still runs after ``timeout`` seconds."""
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

    @async_doc("""Send a signal; with ``tree``, to every process it started too.""")
    async def signal(self, sig: Union[str, int], tree: bool = False) -> None:
        """Send a signal ("SIGTERM", "INT", signal.SIGINT or 15); with
        ``tree``, to every process it started too."""
        await self._http.call(calls.proc_signal(self._id, self.pid, sig, tree))

    async def kill(self) -> None:
        """Kill the process and everything it started, wait for its end and
        drop it from the sandbox's list (later calls on it: NotFoundError)."""
        await self._http.call(calls.proc_kill(self._id, self.pid))

    async def refresh(self) -> ProcessInfo:
        """Re-read the process's info (state, exit code)."""
        self.info = await self._http.call(calls.proc_info(self._id, self.pid))
        return self.info


@async_doc("""``AsyncSandbox``'s code interpreter methods; handlers may be
    coroutine functions (awaited in order).""")
class AsyncCodeInterpreter:
    """``Sandbox``'s code interpreter methods."""

    id: str
    _http: Any

    @async_doc("""See ``Sandbox.run_code``.""")
    async def run_code(self, code: str, language: Optional[str] = None, context: Optional[ContextRef] = None,
                       env: Optional[Dict[str, str]] = None, timeout: Optional[float] = None,
                       on_stdout: Handler = None, on_stderr: Handler = None, on_result: Handler = None,
                       on_error: Handler = None) -> Execution:
        """Run a cell in a code context (``context``, or the default
        context of ``language``, python when both are None, started on
        first use) and return its Execution. ``timeout`` in seconds
        (default 300, 0 for none): the kernel is interrupted at the
        deadline, and restarted if it is still busy 5 s later
        (``restarted=True``). Exceptions in the code are ``error``, not
        raised. Handlers get each stdout/stderr str, Result and
        ExecutionError as they come."""
        body = _run_body(code, language, context, env, timeout)
        dec = _Decoder(on_stdout, on_stderr, on_result, on_error)
        async with self._http.stream("POST", sandbox_path(self.id, "/code/run/stream"), json_body=body) as resp:
            async for chunk in resp.aiter_raw():
                if _ASYNC:  # handlers may be coroutine functions
                    await settle(dec.feed(chunk))
                else:
                    dec.feed(chunk)
                if dec.done:
                    break
        return dec.finish()

    @async_doc(None)
    async def create_code_context(self, language: str = "python", cwd: Optional[str] = None,
                                  env: Optional[Dict[str, str]] = None, user: Optional[str] = None,
                                  id: Optional[str] = None) -> CodeContext:
        """Start a code context: a kernel with its own state."""
        body = {k: v for k, v in {"language": language, "cwd": cwd, "env": env, "user": user, "id": id}.items() if v}
        return CodeContext.from_dict(
            await self._http.json("POST", sandbox_path(self.id, "/code/contexts"), json_body=body))

    async def list_code_contexts(self) -> List[CodeContext]:
        d = await self._http.json("GET", sandbox_path(self.id, "/code/contexts"))
        return [CodeContext.from_dict(c) for c in d.get("contexts") or []]

    async def remove_code_context(self, context: ContextRef) -> None:
        await self._http.request("DELETE", sandbox_path(self.id, "/code/contexts/" + _ctx_id(context)))

    @async_doc(None)
    async def restart_code_context(self, context: ContextRef) -> CodeContext:
        """Replace the context's kernel with a fresh one: its state is lost."""
        path = sandbox_path(self.id, "/code/contexts/" + _ctx_id(context) + "/restart")
        return CodeContext.from_dict(await self._http.json("POST", path))

    @async_doc(None)
    async def interrupt_code_context(self, context: ContextRef) -> CodeContext:
        """Interrupt the context's running cell; its state is kept."""
        path = sandbox_path(self.id, "/code/contexts/" + _ctx_id(context) + "/interrupt")
        return CodeContext.from_dict(await self._http.json("POST", path))


if _ASYNC:
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


@async_doc("""A disposable Linux sandbox, asynchronously; see ``Sandbox``.

    ::

        async with AsyncSandbox.create(template="base") as sbx:
            r = await sbx.exec("echo hi")
        sbx = await AsyncSandbox.create()   # also works; then await sbx.destroy()
    """)
class AsyncSandbox(AsyncCodeInterpreter):
    """A disposable Linux sandbox.

    ::

        with Sandbox.create(template="base", ttl_seconds=300) as sbx:
            r = sbx.exec("python3 -c 'print(sum(range(101)))'")
            print(r.stdout)   # 5050

    Leaving the ``with`` block destroys the sandbox. Configuration comes from
    ``api_key=``/``base_url=`` or AGENTBOX_API_KEY/AGENTBOX_HOST (a
    ``unix:///path`` socket or an ``http://host:port`` URL); as root on the
    daemon's host none is needed.
    """

    def __init__(self, info: SandboxInfo, http: AsyncHTTP) -> None:
        self._info = info
        self._http = http
        self.files = AsyncFiles(http, info.id)
        self.desktop = AsyncDesktop(http, info.id)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r})"

    @property
    def id(self) -> str:
        """The sandbox's id."""
        return self._info.id

    # --- lifecycle ---------------------------------------------------------

    @classmethod
    @async_doc("""Create a sandbox (arguments as ``Sandbox.create``). Await the
        result, or use it directly in ``async with``.""")
    def create(cls, template: Optional[str] = None, *, ttl_seconds: Optional[int] = None,
               isolation: Optional[str] = None, cpu: Optional[float] = None,
               memory_mb: Optional[int] = None, disk_mb: Optional[int] = None,
               pids: Optional[int] = None, env: Optional[Dict[str, str]] = None,
               metadata: Optional[Dict[str, str]] = None, network: Any = None,
               snapshot: Optional[str] = None, on_timeout: Optional[str] = None,
               auto_resume: Optional[bool] = None, idle_timeout: Optional[int] = None,
               user_limits: Optional[Dict[str, int]] = None, api_key: Optional[str] = None,
               base_url: Optional[str] = None, request_timeout: Optional[float] = None) -> _Creating:
        """Create a sandbox from ``template`` (default "base") and return once
        it can run commands. ``ttl_seconds``: destroyed that long after
        creation (-1: never; None: the daemon's default). ``cpu`` in cores,
        sizes in MiB; ``env`` is every command's default environment;
        ``metadata`` free-form labels to find it by with ``Sandbox.list``.
        ``snapshot`` (id or name) starts from a snapshot instead of a
        template; ``on_timeout`` ("destroy" or "pause") is what the TTL
        does; ``auto_resume`` lets commands resume a paused sandbox;
        ``idle_timeout`` (seconds) applies ``on_timeout`` once the sandbox
        has had no command, file, PTY or preview use for that long.
        ``user_limits`` sets per-user kernel counts, e.g.
        ``{"inotify_watches": 524288}`` for a file watcher on a large tree
        (keys: inotify_instances, inotify_watches, msgqueue_bytes,
        sigpending; the rest stay the template's).
        ``network`` is sent as given, for daemons that support it."""
        body = create_body(template, ttl_seconds, isolation, cpu, memory_mb, disk_mb, env, metadata,
                           network, snapshot, pids, on_timeout, auto_resume, idle_timeout, user_limits)
        if _ASYNC:
            return _Creating(cls._open(calls.create(body), api_key, base_url, request_timeout))
        else:
            return cls._open(calls.create(body), api_key, base_url, request_timeout)

    @classmethod
    async def connect(cls, sandbox_id: str, *, api_key: Optional[str] = None, base_url: Optional[str] = None,
                      request_timeout: Optional[float] = None) -> "AsyncSandbox":
        """Attach to an existing sandbox."""
        return await cls._open(calls.info(sandbox_id), api_key, base_url, request_timeout)

    @classmethod
    async def _open(cls, call: calls.Call, api_key: Optional[str], base_url: Optional[str],
                    request_timeout: Optional[float]) -> "AsyncSandbox":
        """A new connection and the sandbox that ``call`` answers with; the
        connection is closed if the call fails."""
        http = AsyncHTTP.open(api_key, base_url, request_timeout)
        try:
            info = await http.call(call)
        except BaseException:
            await http.close()
            raise
        return cls(info, http)

    @classmethod
    @async_doc("""Sandboxes the key can see, filtered by ``metadata`` and ``state``.""")
    async def list(cls, metadata: Optional[Dict[str, str]] = None, *, state: Optional[str] = None,
                   api_key: Optional[str] = None, base_url: Optional[str] = None) -> List[SandboxInfo]:
        """Sandboxes the key can see, filtered by every ``metadata`` pair and
        ``state`` (e.g. "running")."""
        http = AsyncHTTP.open(api_key, base_url, None)
        try:
            return await http.call(calls.sandboxes(metadata, state))
        finally:
            await http.close()

    @classmethod
    async def list_page(cls, metadata: Optional[Dict[str, str]] = None, *, state: Optional[str] = None,
                        limit: int = 100, cursor: Optional[str] = None, api_key: Optional[str] = None,
                        base_url: Optional[str] = None) -> SandboxPage:
        """A page of at most ``limit`` sandboxes (1-1000), oldest first,
        filtered like ``list``; pass its ``next_cursor`` as ``cursor`` (with
        the same filters and limit) for the next page."""
        call = calls.sandbox_page(metadata, state, limit, cursor)
        http = AsyncHTTP.open(api_key, base_url, None)
        try:
            return await http.call(call)
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

    # --- commands ----------------------------------------------------------

    @async_doc("""Run a command to its end; see ``Sandbox.exec``. Callbacks may be
        plain functions or coroutine functions (awaited in order).""")
    async def exec(self, cmd: Command, *, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                   user: Optional[str] = None, timeout: Optional[float] = None, stdin: Optional[Data] = None,
                   on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None) -> ExecResult:
        """Run a command to its end. A str runs through ``/bin/sh -c``; a
        list is an argv. ``timeout`` in seconds: the command (and all it
        started) is killed and the result has ``timed_out=True`` and
        ``exit_code`` 137 — that is not an exception. ``on_stdout`` and
        ``on_stderr`` are called with text as it comes, in order; the
        result holds all of it too."""
        body = exec_body(cmd, env, cwd, user, timeout, stdin)
        if on_stdout is None and on_stderr is None:
            return await self._http.call(calls.exec_(self.id, body))
        dec = StreamDecoder(on_stdout, on_stderr)
        line = json.dumps(body).encode() + b"\n"
        async with self._http.stream("POST", sandbox_path(self.id, "/exec/stream"), content=line,
                                     content_type="application/x-ndjson") as resp:
            async for chunk in resp.aiter_raw():
                if _ASYNC:  # callbacks may be coroutine functions
                    await settle(dec.feed(chunk))
                else:
                    dec.feed(chunk)
                if dec.result is not None:
                    break
        return dec.finish()

    @async_doc("""Start a background process and return at once.""")
    async def start(self, cmd: Command, *, tag: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                    cwd: Optional[str] = None, user: Optional[str] = None,
                    timeout: Optional[float] = None) -> AsyncProcess:
        """Start a background process and return at once. ``tag`` names it."""
        info = await self._http.call(calls.start(self.id, cmd, tag, env, cwd, user, timeout))
        return AsyncProcess(self._http, self.id, info)

    async def processes(self) -> List[ProcessInfo]:
        """The background processes the sandbox's agent knows of."""
        return await self._http.call(calls.processes(self.id))

    async def process(self, ref: Union[int, str]) -> AsyncProcess:
        """Attach to a background process by pid or tag."""
        return AsyncProcess(self._http, self.id, await self._http.call(calls.process(self.id, ref)))

    @async_doc("""Open an interactive terminal; see ``Sandbox.pty``.""")
    async def pty(self, cols: int = 80, rows: int = 24, *, cmd: Optional[Command] = None,
                  env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                  user: Optional[str] = None) -> AsyncPty:
        """Open an interactive terminal running ``cmd`` (default: the
        user's shell). Close it with ``close()`` or a ``with`` block."""
        body = pty_body(cols, rows, cmd, env, cwd, user)
        if _ASYNC:
            return await AsyncPty.start(self._http, self.id, body)
        else:
            return _pty.open_blocking(self._http.cfg, self._http.timeout, self.id, body)

    # --- files -------------------------------------------------------------

    @async_doc("""Copy a local file or directory tree into the sandbox.""")
    async def upload(self, local_path: str, remote_path: str) -> None:
        """Copy a local file or directory tree to ``remote_path`` in the
        sandbox (a directory's content lands under ``remote_path``)."""
        if os.path.isdir(local_path):
            f = await _off_loop(_archive.tar_dir, local_path)
            try:
                await self._http.call(calls.upload_archive(self.id, remote_path, _archive.chunks(f)))
            finally:
                f.close()
            return
        with open(local_path, "rb") as lf:
            await self.files.write(remote_path, lf, mode=os.stat(local_path).st_mode & 0o777)

    @async_doc("""Copy a file or directory tree from the sandbox to ``local_path``.""")
    async def download(self, remote_path: str, local_path: str) -> None:
        """Copy a file or directory tree from the sandbox to ``local_path``
        (a directory's content lands under ``local_path``)."""
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
            await _off_loop(_archive.extract, f, local_path)

    # --- state -------------------------------------------------------------

    @async_doc("""Freeze every process in the sandbox; ``to_disk=True`` (gvisor)
        checkpoints processes and memory to disk.""")
    async def pause(self, to_disk: bool = False) -> SandboxInfo:
        """Freeze every process in the sandbox. ``to_disk=True`` (gvisor
        tier) checkpoints processes and memory to disk and frees the host
        memory; ``resume()`` restores them."""
        self._info = await self._http.call(calls.pause(self.id, to_disk))
        return self._info

    async def resume(self) -> SandboxInfo:
        """Thaw a paused sandbox."""
        self._info = await self._http.call(calls.resume(self.id))
        return self._info

    @async_doc("""Save the sandbox's state (``memory=True``, gvisor: processes too).""")
    async def snapshot(self, name: Optional[str] = None, memory: bool = False) -> Snapshot:
        """Save the sandbox's state; ``Sandbox.create(snapshot=...)`` starts from it.
        ``memory=True`` (gvisor tier) captures processes and memory too."""
        return await self._http.call(calls.snapshot(self.id, name, memory))

    async def reset(self, snapshot: Optional[str] = None, *, template: bool = False) -> SandboxInfo:
        """Put the sandbox's files back to where it started (or to
        ``snapshot``; or with ``template=True`` to its template alone,
        leaving any snapshot), in place; running processes are ended."""
        self._info = await self._http.call(calls.reset(self.id, snapshot, template))
        return self._info

    @async_doc("""Make ``count`` copies of the sandbox (``memory=True``, gvisor:
        each goes on running its processes).""")
    async def fork(self, count: int = 1, memory: bool = False, spread: bool = False) -> List["AsyncSandbox"]:
        """Make ``count`` copies of the sandbox, each with its own connection.
        ``memory=True`` (gvisor tier): each copy goes on running the
        sandbox's processes. ``spread=True``, through a fleet gateway:
        the copies are placed over the fleet's nodes (docs/cluster.md)."""
        infos = await self._http.call(calls.fork(self.id, count, memory, spread))
        return [AsyncSandbox(s, self._http.clone()) for s in infos]

    @async_doc("""The preview URL of ``port`` served inside the sandbox; see
        ``Sandbox.url``.""")
    async def url(self, port: int) -> str:
        """The preview URL of ``port`` served inside the sandbox,
        ``http://<port>-<id>.<preview_domain>/``, with ``?agentbox_token=``
        unless its previews are public (create's ``network={"preview":
        "public"}``). Reads the sandbox's settings from the daemon."""
        return preview_url(self.id, (await self.info()).network, port)

    @async_doc("""Replace the sandbox's egress policy and limits; see ``Sandbox.set_egress``.""")
    async def set_egress(self, egress: str, allow: Optional[List[str]] = None,
                         deny: Optional[List[str]] = None, *, max_connections: int = 0,
                         bandwidth_mbit: int = 0) -> SandboxInfo:
        """Replace the sandbox's egress policy while it runs: ``egress`` is
        "none", "internet" or "custom"; ``allow`` and ``deny`` hold domains
        ("example.org", "*.example.org"; the most specific rule wins),
        CIDRs, addresses and ports (deny wins for addresses). New
        connections see it at once (docs/network.md). ``max_connections``
        (connections open at once) and ``bandwidth_mbit`` (each way) change
        the sandbox's limits: 0 keeps one, -1 removes it."""
        self._info = await self._http.call(calls.set_egress(self.id, egress, allow, deny, max_connections,
                                                            bandwidth_mbit))
        return self._info

    @async_doc("""The sandbox's egress log, oldest first; see ``Sandbox.egress_log``.""")
    async def egress_log(self) -> List[Dict[str, Any]]:
        """The sandbox's egress log, oldest first: each DNS query and web
        connection its policy allowed or denied, as dicts with ``time``,
        ``kind`` ("dns", "connect"), ``proto``, ``dest``, ``name``,
        ``qtype``, ``verdict`` ("allow", "deny"), ``reason`` and
        ``answers``. The last 1000 are kept."""
        return await self._http.call(calls.egress_log(self.id))

    @async_doc("""The sandbox's resource use over the last hour; see ``Sandbox.metrics``.""")
    async def metrics(self) -> List[Dict[str, Any]]:
        """The sandbox's resource use over the last hour, oldest first: one
        dict per sample (every 5 s by default) with ``time``,
        ``cpu_seconds``, ``cpu_percent`` (100 = one core busy),
        ``memory_bytes``, ``disk_bytes``, ``rx_bytes``, ``tx_bytes`` and
        ``pids`` (docs/observability.md)."""
        return await self._http.call(calls.metrics(self.id))
