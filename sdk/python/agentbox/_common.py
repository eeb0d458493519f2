"""Request building and answer parsing shared by the sync and async clients."""

from __future__ import annotations

import base64
import codecs
import inspect
import json
import signal as _signal
from typing import Any, Callable, Dict, List, Optional, Sequence, Union
from urllib.parse import quote

import httpx

from ._config import ENV_API_KEY, ENV_HOST, Config
from .errors import (AgentboxError, InternalError, InvalidArgumentError, NotSupportedError,
                     TimeoutError, UnavailableError, error_from_code, error_from_status)
from .models import ExecResult

USER_AGENT = "agentbox-python"
DEFAULT_TEMPLATE = "base"
# Connecting must be quick; reading may take as long as a command runs.
DEFAULT_TIMEOUT = httpx.Timeout(None, connect=10.0)

Command = Union[str, Sequence[str]]
Callback = Callable[[str], Any]
Data = Union[str, bytes, bytearray, memoryview]


def async_doc(doc: Optional[str]) -> Callable[[Any], Any]:
    """Give an asyncio method or class (async_sandbox.py) a docstring of
    its own: the docstring written in the source is the blocking twin's,
    and scripts/gen_sync.py drops this decorator from sandbox.py."""
    def set_doc(obj: Any) -> Any:
        obj.__doc__ = doc
        return obj
    return set_doc


async def settle(returned: List[Any]) -> None:
    """Await, in order, what callbacks returned that is awaitable (the
    asyncio SDK's callbacks may be coroutine functions)."""
    for r in returned:
        if inspect.isawaitable(r):
            await r


def sandbox_path(sandbox_id: str, rest: str = "") -> str:
    if not sandbox_id:
        raise InvalidArgumentError("a sandbox id is required")
    return "/v1/sandboxes/" + quote(sandbox_id, safe="") + rest


def headers(cfg: Config) -> Dict[str, str]:
    h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if cfg.api_key:
        h["Authorization"] = "Bearer " + cfg.api_key
    return h


def api_error(cfg: Config, status: int, body: bytes) -> AgentboxError:
    """Turn a non-2xx answer into the typed error it names."""
    err: AgentboxError
    try:
        d = json.loads(body)
        e = d["error"]
        err = error_from_code(e["code"], e.get("message", ""), status)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip() or httpx.codes.get_reason_phrase(status)
        err = error_from_status(status, f"agentbox daemon answered {status}: {text}")
    if status == 401 and not cfg.api_key:
        err.message += f" (no API key is set: set {ENV_API_KEY} or pass api_key=)"
        err.args = (err.message,)
    return err


def transport_error(cfg: Config, e: Exception) -> AgentboxError:
    """Turn an httpx failure into a typed error."""
    if isinstance(e, httpx.TimeoutException):
        return TimeoutError(f"request to the agentbox daemon at {cfg.host} timed out ({e})")
    return UnavailableError(
        f"cannot reach the agentbox daemon at {cfg.host} ({e}); is `agentbox serve` running? "
        f"Set {ENV_HOST} to its address")


def to_bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgumentError(f"data must be str or bytes, got {type(data).__name__}")


def command_fields(cmd: Command) -> Dict[str, Any]:
    """A str runs through /bin/sh -c; a list is an argv run directly."""
    if isinstance(cmd, str):
        if not cmd:
            raise InvalidArgumentError("the command is empty; pass a shell string or an argv list")
        return {"shell": cmd}
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidArgumentError("the command must be a non-empty shell string or a list of strings")
    return {"cmd": argv}


def exec_body(cmd: Command, env: Optional[Dict[str, str]], cwd: Optional[str], user: Optional[str],
              timeout: Optional[float], stdin: Optional[Data]) -> Dict[str, Any]:
    body = command_fields(cmd)
    if env:
        body["env"] = dict(env)
    if cwd:
        body["cwd"] = cwd
    if user:
        body["user"] = str(user)
    if timeout is not None:
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be a positive number of seconds, got {timeout}")
        body["timeout_ms"] = max(1, int(timeout * 1000))
    if stdin is not None:
        body["stdin"] = base64.b64encode(to_bytes(stdin)).decode("ascii")
    return body


class StreamDecoder:
    """Feeds a streaming exec's NDJSON events to text callbacks (UTF-8
    decoded incrementally, so a character split between chunks stays whole)
    and builds the ExecResult."""

    def __init__(self, on_stdout: Optional[Callback], on_stderr: Optional[Callback]) -> None:
        self.callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self.decoders = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in self.callbacks}
        self.data: Dict[str, List[bytes]] = {"stdout": [], "stderr": []}
        self.pending = b""
        self.result: Optional[ExecResult] = None

    def feed(self, chunk: bytes) -> List[Any]:
        """Consume bytes of the answer; return what the callbacks returned
        (the async client awaits those that are awaitable)."""
        self.pending += chunk
        out: List[Any] = []
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            if line.strip():
                out.extend(self.event(json.loads(line)))
        return out

    def event(self, ev: Dict[str, Any]) -> List[Any]:
        kind = ev.get("type")
        if kind in ("stdout", "stderr"):
            b = base64.b64decode(ev.get("data") or "")
            self.data[kind].append(b)
            cb = self.callbacks[kind]
            text = self.decoders[kind].decode(b)
            if cb is not None and text:
                return [cb(text)]
        elif kind == "exit":
            rets = []
            for k, cb in self.callbacks.items():
                tail = self.decoders[k].decode(b"", final=True)
                if cb is not None and tail:
                    rets.append(cb(tail))
            out, err = b"".join(self.data["stdout"]), b"".join(self.data["stderr"])
            self.result = ExecResult(
                stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                exit_code=int(ev.get("exit_code", 0)), signal=ev.get("signal", ""),
                timed_out=bool(ev.get("timed_out", False)), truncated=bool(ev.get("truncated", False)),
                duration_ms=float(ev.get("duration_ms", 0.0)), stdout_bytes=out, stderr_bytes=err,
                oom_killed=bool(ev.get("oom_killed", False)))
            return rets
        elif kind == "error":
            e = ev.get("error") or {}
            raise error_from_code(e.get("code", "internal"), e.get("message", "the exec stream failed"))
        return []

    def finish(self) -> ExecResult:
        if self.pending.strip():
            self.feed(b"\n")
        if self.result is None:
            raise UnavailableError("the exec stream ended before the command's exit was reported")
        return self.result


def signal_name(sig: Union[str, int]) -> Union[str, int]:
    """Normalise a signal: "INT", "SIGINT", signal.SIGINT or 2."""
    if isinstance(sig, _signal.Signals):
        return sig.name
    if isinstance(sig, int):
        return sig
    s = str(sig).upper()
    return s if s.startswith("SIG") else "SIG" + s


def create_body(template: Optional[str], ttl_seconds: Optional[int], isolation: Optional[str],
                cpu: Optional[float], memory_mb: Optional[int], disk_mb: Optional[int],
                env: Optional[Dict[str, str]], metadata: Optional[Dict[str, str]],
                network: Any, snapshot: Optional[str], pids: Optional[int],
                on_timeout: Optional[str] = None, auto_resume: Optional[bool] = None,
                idle_timeout: Optional[int] = None,
                user_limits: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    # A snapshot replaces the template; the daemon refuses both at once.
    body: Dict[str, Any] = {} if snapshot and not template else {"template": template or DEFAULT_TEMPLATE}
    for k, v in (("ttl_seconds", ttl_seconds), ("isolation", isolation), ("cpu", cpu),
                 ("memory_mb", memory_mb), ("disk_mb", disk_mb), ("pids", pids),
                 ("network", network), ("snapshot", snapshot), ("on_timeout", on_timeout),
                 ("auto_resume", auto_resume), ("idle_timeout", idle_timeout)):
        if v is not None:
            body[k] = v
    if env:
        body["env"] = dict(env)
    if metadata:
        body["metadata"] = dict(metadata)
    if user_limits:
        body["user_limits"] = dict(user_limits)
    return body


def list_params(metadata: Optional[Dict[str, str]], state: Optional[str]) -> Dict[str, str]:
    q = {"metadata." + k: v for k, v in (metadata or {}).items()}
    if state:
        q["state"] = state
    return q


def limits_body(max_connections: int, bandwidth_mbit: int) -> Dict[str, int]:
    """The egress limits of a set_egress body: 0 (keep the sandbox's) is
    left out, -1 removes a limit (docs/network.md)."""
    out: Dict[str, int] = {}
    for key, v in (("max_connections", max_connections), ("bandwidth_mbit", bandwidth_mbit)):
        if not isinstance(v, int) or isinstance(v, bool) or v < -1:
            raise ValueError(f"{key} must be a positive number, 0 (keep) or -1 (no limit), got {v!r}")
        if v:
            out[key] = v
    return out


def preview_url(sandbox_id: str, network: Dict[str, Any], port: int) -> str:
    """http://<port>-<id>.<preview_domain>/, with ?agentbox_token= unless
    the sandbox's previews are public (docs/network.md)."""
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise InvalidArgumentError(f"port must be 1-65535, got {port!r}")
    domain = (network or {}).get("preview_domain")
    if not domain:
        raise NotSupportedError(
            f"sandbox {sandbox_id} has no preview settings: the daemon predates preview URLs; "
            "upgrade it, or reach the port with exec (curl http://127.0.0.1:PORT) inside the sandbox")
    u = f"http://{port}-{sandbox_id}.{domain}/"
    token = network.get("preview_token")
    if network.get("preview") != "public" and token:
        u += "?agentbox_token=" + quote(token, safe="")
    return u


def decode_json(cfg: Config, body: bytes, what: str) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError as e:
        raise InternalError(f"decoding the answer to {what}: {e}") from e
