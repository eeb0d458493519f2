"""The blocking SDK: ``Sandbox``, its ``files``, background ``Process`` and
``Pty`` terminals, and ``Client`` for daemon-wide calls."""

from __future__ import annotations

import json
import os
import tempfile
from typing import IO, Any, Dict, List, Optional, Union

from . import _archive, _build, _calls as calls, _events
from ._calls import file_query
from ._common import (Callback, Command, Data, StreamDecoder, create_body, exec_body, preview_url, sandbox_path,
                      to_bytes)
from ._http import AsyncHTTP, SyncHTTP
from .code import CodeInterpreter
from ._pty import AsyncPty, LoopThread, Pty, pty_body
from .errors import NotFoundError, TimeoutError
from .models import (ExecResult, FileInfo, Health, PoolStatus, ProcessInfo, ProcessOutput, SandboxInfo, Snapshot,
                     Template)

__all__ = ["Client", "Sandbox", "Files", "Process", "Pty"]

Writable = Union[str, bytes, bytearray, memoryview, IO[bytes]]


def write_content(data: Writable) -> Any:
    """Bytes for str/bytes; a chunk iterator for a binary file object."""
    if hasattr(data, "read"):
        return _archive.chunks(data)  # type: ignore[arg-type]
    return to_bytes(data)  # type: ignore[arg-type]


class Client:
    """Daemon-wide calls (health, templates) and the connection the
    ``Sandbox`` class methods use. Arguments as for ``Sandbox.create``."""

    def __init__(self, api_key: Optional[str] = None, base_url: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        self._http = SyncHTTP.open(api_key, base_url, request_timeout)

    def health(self) -> Health:
        """The daemon's status."""
        return self._http.call(calls.health())

    def pools(self) -> List[PoolStatus]:
        """The warm pools: ready sandboxes per template and tier, creates served."""
        return self._http.call(calls.pools())

    def events(self, types: Optional[List[str]] = None, sandbox: Optional[str] = None,
               tenant: Optional[str] = None) -> "_events.EventStream":
        """Lifecycle events as they happen, as dicts with ``seq``, ``time``,
        ``type`` (created, forked, paused, resumed, stopped, snapshotted,
        reset, expired, destroyed, oom, failed, quota_rejected),
        ``sandbox``, ``tenant``, ``template``, ``isolation`` and ``detail``.
        The stream is subscribed when this returns and runs until closed
        (``close()``, or use it in ``with``); a tenant's key sees its own
        tenant's events only."""
        return _events.EventStream(self._http, _events.params(types, sandbox, tenant))

    def templates(self) -> List[Template]:
        """The templates sandboxes can be created from."""
        return self._http.call(calls.templates())

    def template(self, name: str) -> Template:
        """The newest version of one template."""
        return self._http.call(calls.template(name))

    def build_template(self, name: str, spec: Union[str, bytes], *, context_dir: Optional[str] = None,
                       on_event: Optional[Any] = None) -> Template:
        """Build a new version of template ``name`` from a YAML build spec
        (admin; docs/templates.md). ``context_dir`` is the directory copy
        steps read from; ``on_event`` gets each progress event as a dict
        (``type`` step, output, step_done). Returns the template; a failing
        step raises InvalidArgumentError naming the step, its exit code and
        its last output, and leaves no template version."""
        data, ctx = _build.prepare(name, spec, context_dir)
        ctype, body = _build.multipart(data, ctx)
        try:
            with self._http.stream("POST", "/v1/templates/build", params={"name": name},
                                   content=body, content_type=ctype) as resp:
                return Template.from_dict(_build.follow(resp.iter_lines(), on_event))
        finally:
            if ctx is not None:
                ctx.close()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Files:
    """Files inside a sandbox (``sbx.files``). Paths are paths inside the
    sandbox; relative ones are taken from the sandbox's working directory by
    the guest."""

    def __init__(self, http: SyncHTTP, sandbox_id: str) -> None:
        self._http = http
        self._id = sandbox_id

    _q = staticmethod(file_query)

    def write(self, path: str, data: Writable, *, mode: "Optional[int | str]" = None,
              user: Optional[str] = None) -> FileInfo:
        """Write ``data`` (str, bytes or a binary file object, streamed) to
        ``path``, creating parent directories. ``mode`` e.g. 0o755 or "0755"."""
        return self._http.call(calls.file_write(self._id, path, data, mode, user, write_content))

    def read(self, path: str) -> bytes:
        """The bytes of a regular file."""
        return self._http.call(calls.file_read(self._id, path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The content of a text file."""
        return self.read(path).decode(encoding)

    def read_to(self, path: str, f: IO[bytes]) -> int:
        """Stream a file into the binary file object ``f``; return the bytes copied."""
        n = 0
        with self._http.stream("GET", sandbox_path(self._id, "/files"), params=file_query(path)) as resp:
            for chunk in resp.iter_bytes():
                f.write(chunk)
                n += len(chunk)
        return n

    def list(self, path: str = ".", depth: int = 1) -> List[FileInfo]:
        """Entries of a directory, descending ``depth`` levels (1: its own entries)."""
        return self._http.call(calls.file_list(self._id, path, depth))

    def stat(self, path: str) -> FileInfo:
        """Describe one file (a final symlink is not followed)."""
        return self._http.call(calls.file_stat(self._id, path))

    def exists(self, path: str) -> bool:
        """Whether anything exists at ``path``."""
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def mkdir(self, path: str, *, mode: "Optional[int | str]" = None, user: Optional[str] = None) -> FileInfo:
        """Create a directory and its parents (mkdir -p)."""
        return self._http.call(calls.file_mkdir(self._id, path, mode, user))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file or an empty directory; with ``recursive``, a tree."""
        self._http.call(calls.file_remove(self._id, path, recursive))

    def rename(self, src: str, dst: str) -> None:
        """Move a file or directory inside the sandbox."""
        self._http.call(calls.file_rename(self._id, src, dst))


class Process:
    """A background process started with ``Sandbox.start``. Its fields are
    those of ``info`` as last seen (``pid``, ``tag``, ``state``, ``exit_code``)."""

    def __init__(self, http: SyncHTTP, sandbox_id: str, info: ProcessInfo) -> None:
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

    def wait(self, timeout: Optional[float] = None) -> ProcessInfo:
        """Wait for the process to end and return its final info. Raises
        TimeoutError when it still runs after ``timeout`` seconds."""
        self.info = self._http.call(calls.proc_wait(self._id, self.pid, timeout))
        if self.info.state == "running":
            raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
        return self.info

    def output(self, stdout_offset: int = 0, stderr_offset: int = 0) -> ProcessOutput:
        """Output from the given offsets (default: all the daemon holds)."""
        return self._http.call(calls.proc_output(self._id, self.pid, stdout_offset, stderr_offset))

    def send_stdin(self, data: Data, eof: bool = False) -> None:
        """Write to the process's stdin; ``eof=True`` closes it after."""
        self._http.call(calls.proc_stdin(self._id, self.pid, data, eof))

    def close_stdin(self) -> None:
        """Close the process's stdin."""
        self.send_stdin(b"", eof=True)

    def signal(self, sig: Union[str, int], tree: bool = False) -> None:
        """Send a signal ("SIGTERM", "INT", signal.SIGINT or 15); with
        ``tree``, to every process it started too."""
        self._http.call(calls.proc_signal(self._id, self.pid, sig, tree))

    def kill(self) -> None:
        """Kill the process and everything it started, wait for its end and
        drop it from the sandbox's list (later calls on it: NotFoundError)."""
        self._http.call(calls.proc_kill(self._id, self.pid))

    def refresh(self) -> ProcessInfo:
        """Re-read the process's info (state, exit code)."""
        self.info = self._http.call(calls.proc_info(self._id, self.pid))
        return self.info


class Sandbox(CodeInterpreter):
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

    def __init__(self, info: SandboxInfo, http: SyncHTTP) -> None:
        self._info = info
        self._http = http
        self.files = Files(http, info.id)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r})"

    @property
    def id(self) -> str:
        """The sandbox's id."""
        return self._info.id

    # --- lifecycle ---------------------------------------------------------

    @classmethod
    def create(cls, template: Optional[str] = None, *, ttl_seconds: Optional[int] = None,
               isolation: Optional[str] = None, cpu: Optional[float] = None,
               memory_mb: Optional[int] = None, disk_mb: Optional[int] = None,
               pids: Optional[int] = None, env: Optional[Dict[str, str]] = None,
               metadata: Optional[Dict[str, str]] = None, network: Any = None,
               snapshot: Optional[str] = None, on_timeout: Optional[str] = None,
               auto_resume: Optional[bool] = None, idle_timeout: Optional[int] = None,
               api_key: Optional[str] = None,
               base_url: Optional[str] = None, request_timeout: Optional[float] = None) -> "Sandbox":
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
        ``network`` is sent as given, for daemons that support it."""
        http = SyncHTTP.open(api_key, base_url, request_timeout)
        try:
            body = create_body(template, ttl_seconds, isolation, cpu, memory_mb, disk_mb, env, metadata,
                               network, snapshot, pids, on_timeout, auto_resume, idle_timeout)
            info = http.call(calls.create(body))
        except BaseException:
            http.close()
            raise
        return cls(info, http)

    @classmethod
    def connect(cls, sandbox_id: str, *, api_key: Optional[str] = None, base_url: Optional[str] = None,
                request_timeout: Optional[float] = None) -> "Sandbox":
        """Attach to an existing sandbox."""
        http = SyncHTTP.open(api_key, base_url, request_timeout)
        try:
            info = http.call(calls.info(sandbox_id))
        except BaseException:
            http.close()
            raise
        return cls(info, http)

    @classmethod
    def list(cls, metadata: Optional[Dict[str, str]] = None, *, state: Optional[str] = None,
             api_key: Optional[str] = None, base_url: Optional[str] = None) -> List[SandboxInfo]:
        """Sandboxes the key can see, filtered by every ``metadata`` pair and
        ``state`` (e.g. "running")."""
        http = SyncHTTP.open(api_key, base_url, None)
        try:
            return http.call(calls.sandboxes(metadata, state))
        finally:
            http.close()

    def info(self) -> SandboxInfo:
        """The sandbox as the daemon sees it now."""
        self._info = self._http.call(calls.info(self.id))
        return self._info

    def set_ttl(self, seconds: Optional[int]) -> SandboxInfo:
        """Expire the sandbox ``seconds`` from now; None or -1 removes the TTL."""
        self._info = self._http.call(calls.set_ttl(self.id, seconds))
        return self._info

    def destroy(self) -> None:
        """Destroy the sandbox and everything in it (no error if already gone)."""
        try:
            self._http.call(calls.destroy(self.id))
        except NotFoundError:
            pass

    def close(self) -> None:
        """Release the connection (the sandbox keeps running)."""
        self._http.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.destroy()
        finally:
            self.close()

    # --- commands ----------------------------------------------------------

    def exec(self, cmd: Command, *, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
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
            return self._http.call(calls.exec_(self.id, body))
        dec = StreamDecoder(on_stdout, on_stderr)
        line = json.dumps(body).encode() + b"\n"
        with self._http.stream("POST", sandbox_path(self.id, "/exec/stream"), content=line,
                               content_type="application/x-ndjson") as resp:
            for chunk in resp.iter_raw():
                dec.feed(chunk)
                if dec.result is not None:
                    break
        return dec.finish()

    def start(self, cmd: Command, *, tag: Optional[str] = None, env: Optional[Dict[str, str]] = None,
              cwd: Optional[str] = None, user: Optional[str] = None,
              timeout: Optional[float] = None) -> Process:
        """Start a background process and return at once. ``tag`` names it."""
        return Process(self._http, self.id, self._http.call(calls.start(self.id, cmd, tag, env, cwd, user, timeout)))

    def processes(self) -> List[ProcessInfo]:
        """The background processes the sandbox's agent knows of."""
        return self._http.call(calls.processes(self.id))

    def process(self, ref: Union[int, str]) -> Process:
        """Attach to a background process by pid or tag."""
        return Process(self._http, self.id, self._http.call(calls.process(self.id, ref)))

    def pty(self, cols: int = 80, rows: int = 24, *, cmd: Optional[Command] = None,
            env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
            user: Optional[str] = None) -> Pty:
        """Open an interactive terminal running ``cmd`` (default: the
        user's shell). Close it with ``close()`` or a ``with`` block."""
        body = pty_body(cols, rows, cmd, env, cwd, user)
        lt = LoopThread()
        try:
            inner = lt.run(_start_pty(self._http, self.id, body))
        except BaseException:
            lt.stop()
            raise
        return Pty(lt, inner)

    # --- files -------------------------------------------------------------

    def upload(self, local_path: str, remote_path: str) -> None:
        """Copy a local file or directory tree to ``remote_path`` in the
        sandbox (a directory's content lands under ``remote_path``)."""
        if os.path.isdir(local_path):
            with _archive.tar_dir(local_path) as f:
                self._http.call(calls.upload_archive(self.id, remote_path, _archive.chunks(f)))
            return
        with open(local_path, "rb") as f:
            self.files.write(remote_path, f, mode=os.stat(local_path).st_mode & 0o777)

    def download(self, remote_path: str, local_path: str) -> None:
        """Copy a file or directory tree from the sandbox to ``local_path``
        (a directory's content lands under ``local_path``)."""
        if not self.files.stat(remote_path).is_dir:
            os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
            with open(local_path, "wb") as out:
                self.files.read_to(remote_path, out)
            return
        with tempfile.SpooledTemporaryFile(max_size=_archive.SPOOL) as f:
            with self._http.stream("GET", sandbox_path(self.id, "/files/archive"),
                                   params=file_query(remote_path)) as resp:
                for chunk in resp.iter_bytes():
                    f.write(chunk)
            f.seek(0)
            _archive.extract(f, local_path)  # type: ignore[arg-type]

    # --- state -------------------------------------------------------------

    def pause(self, to_disk: bool = False) -> SandboxInfo:
        """Freeze every process in the sandbox. ``to_disk=True`` (gvisor
        tier) checkpoints processes and memory to disk and frees the host
        memory; ``resume()`` restores them."""
        self._info = self._http.call(calls.pause(self.id, to_disk))
        return self._info

    def resume(self) -> SandboxInfo:
        """Thaw a paused sandbox."""
        self._info = self._http.call(calls.resume(self.id))
        return self._info

    def snapshot(self, name: Optional[str] = None, memory: bool = False) -> Snapshot:
        """Save the sandbox's state; ``Sandbox.create(snapshot=...)`` starts from it.
        ``memory=True`` (gvisor tier) captures processes and memory too."""
        return self._http.call(calls.snapshot(self.id, name, memory))

    def reset(self, snapshot: Optional[str] = None, *, template: bool = False) -> SandboxInfo:
        """Put the sandbox's files back to where it started (or to
        ``snapshot``; or with ``template=True`` to its template alone,
        leaving any snapshot), in place; running processes are ended."""
        self._info = self._http.call(calls.reset(self.id, snapshot, template))
        return self._info

    def fork(self, count: int = 1, memory: bool = False) -> List["Sandbox"]:
        """Make ``count`` copies of the sandbox, each with its own connection.
        ``memory=True`` (gvisor tier): each copy goes on running the
        sandbox's processes."""
        return [Sandbox(s, self._http.clone()) for s in self._http.call(calls.fork(self.id, count, memory))]

    def url(self, port: int) -> str:
        """The preview URL of ``port`` served inside the sandbox,
        ``http://<port>-<id>.<preview_domain>/``, with ``?agentbox_token=``
        unless its previews are public (create's ``network={"preview":
        "public"}``). Reads the sandbox's settings from the daemon."""
        return preview_url(self.id, self.info().network, port)

    def set_egress(self, egress: str, allow: Optional[List[str]] = None,
                   deny: Optional[List[str]] = None, *, max_connections: int = 0,
                   bandwidth_mbit: int = 0) -> SandboxInfo:
        """Replace the sandbox's egress policy while it runs: ``egress`` is
        "none", "internet" or "custom"; ``allow`` and ``deny`` hold domains
        ("example.org", "*.example.org"; the most specific rule wins),
        CIDRs, addresses and ports (deny wins for addresses). New
        connections see it at once (docs/network.md). ``max_connections``
        (connections open at once) and ``bandwidth_mbit`` (each way) change
        the sandbox's limits: 0 keeps one, -1 removes it."""
        self._info = self._http.call(calls.set_egress(self.id, egress, allow, deny, max_connections, bandwidth_mbit))
        return self._info

    def egress_log(self) -> List[Dict[str, Any]]:
        """The sandbox's egress log, oldest first: each DNS query and web
        connection its policy allowed or denied, as dicts with ``time``,
        ``kind`` ("dns", "connect"), ``proto``, ``dest``, ``name``,
        ``qtype``, ``verdict`` ("allow", "deny"), ``reason`` and
        ``answers``. The last 1000 are kept."""
        return self._http.call(calls.egress_log(self.id))

    def metrics(self) -> List[Dict[str, Any]]:
        """The sandbox's resource use over the last hour, oldest first: one
        dict per sample (every 5 s by default) with ``time``,
        ``cpu_seconds``, ``cpu_percent`` (100 = one core busy),
        ``memory_bytes``, ``disk_bytes``, ``rx_bytes``, ``tx_bytes`` and
        ``pids`` (docs/observability.md)."""
        return self._http.call(calls.metrics(self.id))


async def _start_pty(http: SyncHTTP, sandbox_id: str, body: Dict[str, Any]) -> AsyncPty:
    return await AsyncPty.start(AsyncHTTP(http.cfg, http.timeout), sandbox_id, body)
