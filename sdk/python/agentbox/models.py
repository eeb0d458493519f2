"""Plain data classes for what the API answers (api/openapi.yaml)."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

__all__ = [
    "SandboxInfo", "Resources", "FileInfo", "ExecResult", "Template", "Health",
    "ProcessInfo", "ProcessOutput", "Snapshot", "PushResult", "NodeStatus", "FleetNode",
]

_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_time(v: Optional[str]) -> Optional[datetime]:
    """Parse an RFC 3339 time as Go writes it (nanoseconds, ``Z``)."""
    if not v:
        return None
    s = _FRACTION.sub(r"\1", v)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(s)
    except ValueError:
        return None


def _b64(v: Optional[str]) -> bytes:
    return base64.b64decode(v) if v else b""


@dataclass
class Resources:
    """A sandbox's limits, as applied."""

    cpu: float = 0.0
    memory_mb: int = 0
    disk_mb: int = 0
    pids: int = 0

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]]) -> "Resources":
        d = d or {}
        return cls(cpu=float(d.get("cpu", 0)), memory_mb=int(d.get("memory_mb", 0)),
                   disk_mb=int(d.get("disk_mb", 0)), pids=int(d.get("pids", 0)))


@dataclass
class PoolStatus:
    """A warm pool (``GET /v1/pools``): sandboxes of one template, tier,
    limits and egress booted ahead of time and handed out on create."""

    template: str
    isolation: str = ""
    size: int = 0
    ready: int = 0
    resources: Resources = field(default_factory=Resources)
    egress: str = "none"
    served: int = 0
    misses: int = 0
    booted: int = 0
    failures: int = 0
    last_error: str = ""
    node: str = ""  # through a fleet gateway: the node that keeps the pool

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "PoolStatus":
        return cls(template=d.get("template", ""), isolation=d.get("isolation", ""), node=d.get("node", ""),
                   size=int(d.get("size", 0)), ready=int(d.get("ready", 0)),
                   resources=Resources.from_dict(d.get("resources")), egress=d.get("egress", "none"),
                   served=int(d.get("served", 0)), misses=int(d.get("misses", 0)),
                   booted=int(d.get("booted", 0)), failures=int(d.get("failures", 0)),
                   last_error=d.get("last_error", ""))


@dataclass
class SandboxInfo:
    """What the API shows of a sandbox (``GET /v1/sandboxes/{id}``)."""

    id: str
    state: str
    template: str = ""
    template_version: str = ""
    isolation: str = ""
    resources: Resources = field(default_factory=Resources)
    env: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    created_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    error: str = ""
    #: egress policy and preview access (``preview``, ``preview_token``,
    #: ``preview_domain``, ...), as the API sent it; see docs/network.md.
    network: Dict[str, Any] = field(default_factory=dict)
    #: processes the OOM killer killed in the running sandbox, and when
    #: the daemon first saw the latest (``info()`` only).
    oom_kills: int = 0
    last_oom_at: Optional[datetime] = None
    #: per-user kernel counts as applied (``inotify_instances``,
    #: ``inotify_watches``, ``msgqueue_bytes``, ``sigpending``).
    user_limits: Dict[str, int] = field(default_factory=dict)
    #: the node_id of the fleet node that runs it (its id's first three
    #: characters; "" on a daemon without node_id; docs/cluster.md).
    node: str = ""

    @property
    def time_left(self) -> Optional[float]:
        """Seconds until the TTL ends the sandbox (0 once past), as of
        when this info was read; None without a TTL."""
        if self.expires_at is None:
            return None
        return max(0.0, (self.expires_at - datetime.now(timezone.utc)).total_seconds())

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"], state=d.get("state", ""), template=d.get("template", ""),
            template_version=d.get("template_version", ""), isolation=d.get("isolation", ""),
            resources=Resources.from_dict(d.get("resources")), env=d.get("env") or {},
            metadata=d.get("metadata") or {}, created_at=parse_time(d.get("created_at")),
            expires_at=parse_time(d.get("expires_at")), error=d.get("error", ""),
            network=d.get("network") or {},
            oom_kills=d.get("oom_kills", 0), last_oom_at=parse_time(d.get("last_oom_at")),
            user_limits=d.get("user_limits") or {}, node=d.get("node", ""),
        )


@dataclass
class SandboxPage:
    """A page of ``Sandbox.list_page``: the sandboxes, oldest first, and
    the cursor of the next page (None on the last one)."""

    sandboxes: List[SandboxInfo]
    next_cursor: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SandboxPage":
        return cls(sandboxes=[SandboxInfo.from_dict(x) for x in d.get("sandboxes") or []],
                   next_cursor=d.get("next_cursor") or None)


@dataclass
class FileInfo:
    """One file inside a sandbox. ``type`` is "file", "dir", "symlink" or
    "other"; ``mode`` the octal permission bits as a string, e.g. "0644"."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: str = ""
    mtime: Optional[datetime] = None
    target: str = ""
    uid: int = 0
    gid: int = 0

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "FileInfo":
        return cls(name=d.get("name", ""), path=d.get("path", ""), type=d.get("type", ""),
                   size=int(d.get("size", 0)), mode=d.get("mode", ""), mtime=parse_time(d.get("mtime")),
                   target=d.get("target", ""), uid=int(d.get("uid", 0)), gid=int(d.get("gid", 0)))


@dataclass
class ExecResult:
    """The result of a command that ran to its end.

    A command that failed is not an error: look at ``exit_code``, ``signal``
    (e.g. "SIGKILL") and ``timed_out`` (the ``timeout`` passed; the command
    was killed, ``exit_code`` is then 137) or ``oom_killed`` (the kernel's
    OOM killer ended it at the sandbox's memory limit; ``exit_code`` 137).
    ``stdout``/``stderr`` are text
    (invalid UTF-8 replaced); ``stdout_bytes``/``stderr_bytes`` the exact bytes.
    """

    stdout: str
    stderr: str
    exit_code: int
    signal: str = ""
    timed_out: bool = False
    truncated: bool = False
    duration_ms: float = 0.0
    oom_killed: bool = False
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ExecResult":
        if d.get("encoding") == "base64":
            out, err = _b64(d.get("stdout")), _b64(d.get("stderr"))
        else:
            out, err = (d.get("stdout") or "").encode(), (d.get("stderr") or "").encode()
        return cls(stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                   exit_code=int(d.get("exit_code", 0)), signal=d.get("signal", ""),
                   timed_out=bool(d.get("timed_out", False)), truncated=bool(d.get("truncated", False)),
                   duration_ms=float(d.get("duration_ms", 0.0)), stdout_bytes=out, stderr_bytes=err,
                   oom_killed=bool(d.get("oom_killed", False)))


@dataclass
class Template:
    """A template sandboxes are created from."""

    name: str
    version: str = ""
    user: str = ""
    workdir: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    size_bytes: int = 0
    created_at: Optional[datetime] = None
    #: The tenant that owns the template; "" for a public one.
    tenant: str = ""
    #: Built templates: the base (NAME@VERSION), own layers (top first),
    #: start command and readiness check; versions: every version's number.
    from_template: str = ""
    layers: List[str] = field(default_factory=list)
    start: str = ""
    ready: Optional[Dict[str, Any]] = None
    versions: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Template":
        return cls(name=d["name"], version=d.get("version", ""), user=d.get("user", ""),
                   workdir=d.get("workdir", ""), env=d.get("env") or {}, tenant=d.get("tenant", ""),
                   size_bytes=int(d.get("size_bytes", 0)), created_at=parse_time(d.get("created_at")),
                   from_template=d.get("from", ""), layers=list(d.get("layers") or []),
                   start=d.get("start", ""), ready=d.get("ready"), versions=list(d.get("versions") or []))


@dataclass
class Health:
    """The daemon's status (``GET /v1/health``)."""

    status: str
    version: str = ""
    drivers: List[str] = field(default_factory=list)
    sandboxes: int = 0

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Health":
        return cls(status=d.get("status", ""), version=d.get("version", ""),
                   drivers=list(d.get("drivers") or []), sandboxes=int(d.get("sandboxes", 0)))


@dataclass
class ProcessInfo:
    """A background process started with ``start``. ``state`` is e.g.
    "running" or "exited"; ``exit_code``/``signal`` are set once it ended."""

    pid: int
    tag: str = ""
    cmd: List[str] = field(default_factory=list)
    state: str = ""
    exit_code: Optional[int] = None
    signal: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    started_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ProcessInfo":
        cmd = d.get("cmd") or []
        if isinstance(cmd, str):
            cmd = [cmd]
        sig = d.get("signal") or ""
        return cls(pid=int(d.get("pid", 0)), tag=d.get("tag") or "", cmd=list(cmd),
                   state=d.get("state", ""), exit_code=d.get("exit_code"), signal=str(sig),
                   timed_out=bool(d.get("timed_out", False)), oom_killed=bool(d.get("oom_killed", False)),
                   started_at=parse_time(d.get("started_at")), ended_at=parse_time(d.get("ended_at")))


@dataclass
class ProcessOutput:
    """Output of a background process from the offsets asked for. Pass
    ``stdout_offset``/``stderr_offset`` back to ``output()`` to read on;
    ``*_dropped`` count bytes that had already left the daemon's buffer."""

    stdout: str
    stderr: str
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    stdout_offset: int = 0
    stderr_offset: int = 0
    state: str = ""
    exit_code: Optional[int] = None
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ProcessOutput":
        out, err = _b64(d.get("stdout")), _b64(d.get("stderr"))
        return cls(stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                   stdout_bytes=out, stderr_bytes=err, stdout_offset=int(d.get("stdout_offset", 0)),
                   stderr_offset=int(d.get("stderr_offset", 0)), state=d.get("state", ""),
                   exit_code=d.get("exit_code"), stdout_dropped=int(d.get("stdout_dropped", 0)),
                   stderr_dropped=int(d.get("stderr_dropped", 0)))


@dataclass
class Snapshot:
    """A saved state of a sandbox. ``raw`` holds every field the API sent."""

    id: str
    name: str = ""
    sandbox_id: str = ""
    created_at: Optional[datetime] = None
    size_bytes: int = 0
    raw: Dict[str, Any] = field(default_factory=dict)
    #: it holds processes and memory too (gvisor tier)
    memory: bool = False

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Snapshot":
        return cls(id=str(d.get("id") or d.get("name") or ""), name=d.get("name", ""),
                   sandbox_id=d.get("sandbox_id", ""), created_at=parse_time(d.get("created_at")),
                   size_bytes=int(d.get("size_bytes", 0)), raw=dict(d), memory=bool(d.get("memory", False)))


@dataclass
class PushResult:
    """A template or snapshot pushed to an OCI registry: the ref pushed to
    and the manifest digest, which names the same bytes at any registry
    (``HOST/REPO@DIGEST``)."""

    ref: str
    digest: str = ""

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "PushResult":
        return cls(ref=d.get("ref", ""), digest=d.get("digest", ""))


@dataclass
class NodeStatus:
    """A node's status as a fleet gateway polls it (``GET /v1/node``;
    docs/cluster.md). ``tiers`` are dicts as ``GET /v1/info`` shows them
    (``name``, ``available``, ``default``, ``error``)."""

    node_id: str = ""
    version: str = ""
    tiers: List[Dict[str, Any]] = field(default_factory=list)
    sandboxes: int = 0
    cpus: int = 0
    load1: float = 0.0
    memory_total_mb: int = 0
    memory_available_mb: int = 0
    templates: List[str] = field(default_factory=list)
    draining: bool = False

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]]) -> "NodeStatus":
        d = d or {}
        return cls(node_id=d.get("node_id", ""), version=d.get("version", ""),
                   tiers=[dict(t) for t in d.get("tiers") or []], sandboxes=int(d.get("sandboxes", 0)),
                   cpus=int(d.get("cpus", 0)), load1=float(d.get("load1", 0.0)),
                   memory_total_mb=int(d.get("memory_total_mb", 0)),
                   memory_available_mb=int(d.get("memory_available_mb", 0)),
                   templates=list(d.get("templates") or []), draining=bool(d.get("draining", False)))


@dataclass
class FleetNode:
    """One node of a fleet gateway's membership (``GET /v1/fleet/nodes``):
    ``available`` when its last poll succeeded and no request has failed to
    connect since; ``status`` is its last ``GET /v1/node`` answer (None
    before the first success)."""

    id: str
    url: str = ""
    available: bool = False
    last_error: str = ""
    last_poll: Optional[datetime] = None
    in_flight: int = 0
    status: Optional[NodeStatus] = None
    source: str = ""  # "config" ([[fleet.node]]) or "kubernetes"
    lease: str = ""  # from Kubernetes: why its Lease holds it down
    lost_sandboxes: int = 0  # unavailable: what it ran at its last poll

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "FleetNode":
        st = d.get("status")
        return cls(id=d.get("id", ""), url=d.get("url", ""), available=bool(d.get("available", False)),
                   source=d.get("source", ""), lease=d.get("lease", ""), lost_sandboxes=int(d.get("lost_sandboxes", 0)),
                   last_error=d.get("last_error", ""), last_poll=parse_time(d.get("last_poll")),
                   in_flight=int(d.get("in_flight", 0)), status=NodeStatus.from_dict(st) if st else None)
