"""Every plain API call, described once: the HTTP verb, the path, the query
and body, and how the answer is decoded. ``Sandbox``/``Client`` send a
``Call`` with ``SyncHTTP.call`` and their asyncio twins with
``AsyncHTTP.call``, so the two classes differ only in that transport.
Streaming calls (NDJSON exec, archives, template builds, PTYs) stay with
their classes."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union
from urllib.parse import quote

from ._common import Command, Data, exec_body, limits_body, list_params, sandbox_path, signal_name, to_bytes
from .errors import InvalidArgumentError
from .models import (ExecResult, FileInfo, FleetNode, Health, NodeStatus, PoolStatus, ProcessInfo, ProcessOutput, PushResult,
                     SandboxInfo, SandboxPage, Snapshot, Template)

Decode = Callable[[Any], Any]


class Call:
    """One request and the decoding of its answer. ``decode`` gets the
    answer's JSON; without it the answer is dropped (None), or returned
    as bytes when ``raw``."""

    __slots__ = ("method", "path", "params", "json_body", "content", "content_type", "decode", "raw")

    def __init__(self, method: str, path: str, *, params: Optional[Dict[str, Any]] = None,
                 json_body: Any = None, content: Any = None, content_type: Optional[str] = None,
                 decode: Optional[Decode] = None, raw: bool = False) -> None:
        self.method = method
        self.path = path
        self.params = params
        self.json_body = json_body
        self.content = content
        self.content_type = content_type
        self.decode = decode
        self.raw = raw

    def request_args(self) -> Dict[str, Any]:
        return {"params": self.params, "json_body": self.json_body, "content": self.content,
                "content_type": self.content_type}


def _list_of(key: str, item: Decode) -> Decode:
    return lambda d: [item(x) for x in d.get(key) or []]


def file_mode(mode: "Optional[int | str]") -> Optional[str]:
    """A mode for the API: an int (0o600) or an octal string ("0600", "600",
    "0o600"), the form listings return."""
    if mode is None:
        return None
    if isinstance(mode, str):
        t = mode.strip().lower()
        if t.startswith("0o"):
            t = t[2:]
        if not t or any(c not in "01234567" for c in t) or int(t, 8) > 0o7777:
            raise InvalidArgumentError(f"mode must be an int like 0o600 or an octal string like \"0600\", got {mode!r}")
        mode = int(t, 8)
    elif isinstance(mode, bool) or not isinstance(mode, int):
        raise InvalidArgumentError(f"mode must be an int like 0o600 or an octal string like \"0600\", got {mode!r}")
    return "%04o" % (mode & 0o7777)


def file_query(path: str, **extra: Any) -> Dict[str, str]:
    if not path:
        raise InvalidArgumentError("a path inside the sandbox is required")
    q = {"path": path}
    q.update({k: str(v) for k, v in extra.items() if v is not None})
    return q


# --- daemon-wide -----------------------------------------------------------

def health() -> Call:
    return Call("GET", "/v1/health", decode=Health.from_dict)


def pools() -> Call:
    return Call("GET", "/v1/pools", decode=_list_of("pools", PoolStatus.from_dict))


def templates() -> Call:
    return Call("GET", "/v1/templates", decode=lambda d: [Template.from_dict(t) for t in d["templates"]])


def template(name: str) -> Call:
    if not name:
        raise InvalidArgumentError("a template name is required")
    return Call("GET", "/v1/templates/" + name, decode=Template.from_dict)


def remove_template(name: str) -> Call:
    if not name:
        raise InvalidArgumentError("a template name is required")
    return Call("DELETE", "/v1/templates/" + quote(name, safe=""))


def _registry_ref(ref: str, what: str) -> str:
    if not ref:
        raise InvalidArgumentError(f"a registry reference to {what} is required: HOST[:PORT]/REPO[:TAG], "
                                   "the registry's host always written out")
    return ref


def _push(collection: str, key: str, ref: str) -> Call:
    return Call("POST", f"/v1/{collection}/" + quote(key, safe="") + "/push",
                json_body={"ref": _registry_ref(ref, "push to")}, decode=PushResult.from_dict)


def _pull(collection: str, ref: str, name: Optional[str], decode) -> Call:
    body = {"ref": _registry_ref(ref, "pull")}
    if name:
        body["name"] = name
    return Call("POST", f"/v1/{collection}/pull", json_body=body, decode=decode)


def push_template(name: str, ref: str) -> Call:
    if not name:
        raise InvalidArgumentError("a template name is required")
    return _push("templates", name, ref)


def pull_template(ref: str, name: Optional[str]) -> Call:
    return _pull("templates", ref, name, Template.from_dict)


def push_snapshot(snapshot: str, ref: str) -> Call:
    if not snapshot:
        raise InvalidArgumentError("a snapshot id or name is required")
    return _push("snapshots", snapshot, ref)


def pull_snapshot(ref: str, name: Optional[str]) -> Call:
    return _pull("snapshots", ref, name, Snapshot.from_dict)


def fleet_nodes() -> Call:
    return Call("GET", "/v1/fleet/nodes", decode=_list_of("nodes", FleetNode.from_dict))


def node_status() -> Call:
    return Call("GET", "/v1/node", decode=NodeStatus.from_dict)


# --- sandboxes ---------------------------------------------------------------

def create(body: Dict[str, Any]) -> Call:
    return Call("POST", "/v1/sandboxes", json_body=body, decode=SandboxInfo.from_dict)


def sandboxes(metadata: Optional[Dict[str, str]], state: Optional[str]) -> Call:
    return Call("GET", "/v1/sandboxes", params=list_params(metadata, state),
                decode=_list_of("sandboxes", SandboxInfo.from_dict))


def sandbox_page(metadata: Optional[Dict[str, str]], state: Optional[str], limit: int,
                 cursor: Optional[str]) -> Call:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise ValueError(f"limit must be a number from 1 to 1000, got {limit!r}")
    q = list_params(metadata, state)
    q["limit"] = str(limit)
    if cursor:
        q["cursor"] = cursor
    return Call("GET", "/v1/sandboxes", params=q, decode=SandboxPage.from_dict)


def info(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id), decode=SandboxInfo.from_dict)


def set_ttl(sandbox_id: str, seconds: Optional[int]) -> Call:
    secs = -1 if seconds is None or seconds < 0 else int(seconds)
    return Call("PATCH", sandbox_path(sandbox_id), json_body={"ttl_seconds": secs}, decode=SandboxInfo.from_dict)


def destroy(sandbox_id: str) -> Call:
    return Call("DELETE", sandbox_path(sandbox_id))


def exec_(sandbox_id: str, body: Dict[str, Any]) -> Call:
    return Call("POST", sandbox_path(sandbox_id, "/exec"), json_body=body, decode=ExecResult.from_dict)


def start(sandbox_id: str, cmd: Command, tag: Optional[str], env: Optional[Dict[str, str]], cwd: Optional[str],
          user: Optional[str], timeout: Optional[float]) -> Call:
    body = exec_body(cmd, env, cwd, user, timeout, None)
    if tag:
        body["tag"] = tag
    return Call("POST", sandbox_path(sandbox_id, "/processes"), json_body=body, decode=ProcessInfo.from_dict)


def processes(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id, "/processes"), decode=_list_of("processes", ProcessInfo.from_dict))


def process(sandbox_id: str, ref: Union[int, str]) -> Call:
    return Call("GET", sandbox_path(sandbox_id, f"/processes/{ref}"), decode=ProcessInfo.from_dict)


def upload_archive(sandbox_id: str, remote_path: str, content: Any) -> Call:
    return Call("PUT", sandbox_path(sandbox_id, "/files/archive"), params=file_query(remote_path),
                content=content, content_type="application/x-tar")


def pause(sandbox_id: str, to_disk: bool) -> Call:
    body = {"to_disk": True} if to_disk else None
    return Call("POST", sandbox_path(sandbox_id, "/pause"), json_body=body, decode=SandboxInfo.from_dict)


def resume(sandbox_id: str) -> Call:
    return Call("POST", sandbox_path(sandbox_id, "/resume"), decode=SandboxInfo.from_dict)


def snapshot(sandbox_id: str, name: Optional[str], memory: bool) -> Call:
    body: Dict[str, Any] = {"name": name} if name else {}
    if memory:
        body["memory"] = True
    return Call("POST", sandbox_path(sandbox_id, "/snapshots"), json_body=body, decode=Snapshot.from_dict)


def reset(sandbox_id: str, snapshot: Optional[str], template: bool = False) -> Call:
    if snapshot and template:
        raise InvalidArgumentError("reset to a snapshot or to the template, not both")
    body: Dict[str, Any] = {"snapshot": snapshot} if snapshot else {}
    if template:
        body["template"] = True
    return Call("POST", sandbox_path(sandbox_id, "/reset"), json_body=body, decode=SandboxInfo.from_dict)


def fork(sandbox_id: str, count: int, memory: bool, spread: bool = False) -> Call:
    """Decodes to the copies' SandboxInfo; the caller gives each its connection."""
    if count < 1:
        raise InvalidArgumentError(f"count must be 1 or more, got {count}")
    body: Dict[str, Any] = {"count": count}
    if memory:
        body["memory"] = True
    if spread:
        body["spread"] = True
    return Call("POST", sandbox_path(sandbox_id, "/fork"), json_body=body,
                decode=_list_of("sandboxes", SandboxInfo.from_dict))


def set_egress(sandbox_id: str, egress: str, allow: Optional[List[str]], deny: Optional[List[str]],
               max_connections: int, bandwidth_mbit: int) -> Call:
    body: Dict[str, Any] = {"egress": egress, "allow": list(allow or []), "deny": list(deny or [])}
    body.update(limits_body(max_connections, bandwidth_mbit))
    return Call("POST", sandbox_path(sandbox_id, "/egress"), json_body=body, decode=SandboxInfo.from_dict)


def egress_log(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id, "/egress/log"), decode=lambda d: list(d.get("entries") or []))


def metrics(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id, "/metrics"), decode=lambda d: list(d.get("samples") or []))


# --- files -------------------------------------------------------------------

def file_write(sandbox_id: str, path: str, data: Any, mode: Optional[int], user: Optional[str],
               content: Callable[[Any], Any]) -> Call:
    """``content`` turns ``data`` into what the transport sends (a sync or
    an async chunk iterator for a file object)."""
    q = file_query(path, mode=file_mode(mode), user=user)
    return Call("PUT", sandbox_path(sandbox_id, "/files"), params=q, content=content(data),
                content_type="application/octet-stream", decode=FileInfo.from_dict)


def file_read(sandbox_id: str, path: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id, "/files"), params=file_query(path), raw=True)


def file_list(sandbox_id: str, path: str, depth: int) -> Call:
    if depth < 1:
        raise InvalidArgumentError(f"depth must be 1 or more, got {depth}")
    return Call("GET", sandbox_path(sandbox_id, "/files/list"), params=file_query(path, depth=depth),
                decode=_list_of("entries", FileInfo.from_dict))


def file_stat(sandbox_id: str, path: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id, "/files/stat"), params=file_query(path), decode=FileInfo.from_dict)


def file_mkdir(sandbox_id: str, path: str, mode: Optional[int], user: Optional[str]) -> Call:
    file_query(path)
    body: Dict[str, Any] = {"path": path}
    if mode is not None:
        body["mode"] = file_mode(mode)
    if user:
        body["user"] = user
    return Call("POST", sandbox_path(sandbox_id, "/files/mkdir"), json_body=body, decode=FileInfo.from_dict)


def file_remove(sandbox_id: str, path: str, recursive: bool) -> Call:
    return Call("DELETE", sandbox_path(sandbox_id, "/files"),
                params=file_query(path, recursive="true" if recursive else None))


def file_rename(sandbox_id: str, src: str, dst: str) -> Call:
    if not src or not dst:
        raise InvalidArgumentError("rename wants both a source and a destination path")
    return Call("POST", sandbox_path(sandbox_id, "/files/rename"), json_body={"from": src, "to": dst})


# --- background processes ------------------------------------------------------

def _proc(sandbox_id: str, pid: int, rest: str = "") -> str:
    return sandbox_path(sandbox_id, f"/processes/{pid}{rest}")


def proc_wait(sandbox_id: str, pid: int, timeout: Optional[float]) -> Call:
    q = {} if timeout is None else {"timeout_ms": str(max(1, int(timeout * 1000)))}
    return Call("POST", _proc(sandbox_id, pid, "/wait"), params=q, decode=ProcessInfo.from_dict)


def proc_output(sandbox_id: str, pid: int, stdout_offset: int, stderr_offset: int) -> Call:
    q = {"stdout_offset": str(stdout_offset), "stderr_offset": str(stderr_offset)}
    return Call("GET", _proc(sandbox_id, pid, "/output"), params=q, decode=ProcessOutput.from_dict)


def proc_stdin(sandbox_id: str, pid: int, data: Data, eof: bool) -> Call:
    q = {"eof": "true"} if eof else None
    return Call("POST", _proc(sandbox_id, pid, "/stdin"), params=q, content=to_bytes(data),
                content_type="application/octet-stream")


def proc_signal(sandbox_id: str, pid: int, sig: Union[str, int], tree: bool) -> Call:
    return Call("POST", _proc(sandbox_id, pid, "/signal"), json_body={"signal": signal_name(sig), "tree": tree})


def proc_kill(sandbox_id: str, pid: int) -> Call:
    return Call("DELETE", _proc(sandbox_id, pid))


def proc_info(sandbox_id: str, pid: int) -> Call:
    return Call("GET", _proc(sandbox_id, pid), decode=ProcessInfo.from_dict)
