"""The code interpreter: stateful Jupyter kernels in the sandbox.

::

    with Sandbox.create(template="python") as sbx:
        sbx.run_code("x = 41")
        ex = sbx.run_code("x + 1")
        print(ex.text)                      # 42
        ex = sbx.run_code("import matplotlib.pyplot as plt; plt.plot([1, 3, 2]); plt.show()")
        png = ex.results[0].png             # base64 PNG

``Sandbox`` and ``AsyncSandbox`` get these methods from ``CodeInterpreter``
and ``AsyncCodeInterpreter``. See docs/interpreter.md.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union
from urllib.parse import quote

from ._common import sandbox_path
from .errors import InvalidArgumentError, UnavailableError

_FIELDS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript")


@dataclass
class Result:
    """One rich output of a cell: the cell's value (``is_main_result``) or
    something it displayed. Each MIME type the kernel gave has its
    attribute (``png``/``jpeg``/``pdf`` as base64 str); others are in
    ``extra``."""

    is_main_result: bool = False
    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    execution_count: Optional[int] = None

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Result":
        r = cls(is_main_result=bool(d.get("is_main_result")), extra=dict(d.get("extra") or {}),
                execution_count=d.get("execution_count"))
        for f in _FIELDS:
            if d.get(f) is not None:
                setattr(r, f, d[f])
        return r

    def formats(self) -> List[str]:
        """The formats this result has: "text", "png", ..., then extra's
        MIME types."""
        return [f for f in _FIELDS if getattr(self, f) is not None] + list(self.extra)


@dataclass
class Logs:
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class ExecutionError:
    """An exception raised by the code (not an API failure), or the
    agent's own TimeoutError, KernelDied or ContextRestarting."""

    name: str
    value: str
    traceback: str


@dataclass
class Execution:
    """The whole of one run. ``restarted`` says the kernel was restarted
    during or just before it: earlier state is lost."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    status: str = ""
    duration_ms: float = 0.0
    restarted: bool = False
    context: str = ""

    @property
    def text(self) -> Optional[str]:
        """The text of the main result (the cell's value), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None


@dataclass
class CodeContext:
    id: str
    language: str
    kernel: str = ""
    cwd: str = ""
    user: str = ""
    state: str = ""
    pid: int = 0
    execution_count: int = 0
    started_at: str = ""
    restarts: int = 0
    last_exit: str = ""

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "CodeContext":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


ContextRef = Union[str, CodeContext]
Handler = Optional[Callable[[Any], Any]]


def _ctx_id(ctx: ContextRef) -> str:
    cid = ctx.id if isinstance(ctx, CodeContext) else ctx
    if not cid:
        raise InvalidArgumentError("a code context (or its id) is required")
    return quote(cid, safe="")


def _run_body(code: str, language: Optional[str], context: Optional[ContextRef], env: Optional[Dict[str, str]],
              timeout: Optional[float]) -> Dict[str, Any]:
    if language and context:
        raise InvalidArgumentError("give language or context, not both: a context has its language")
    body: Dict[str, Any] = {"code": code}
    if context:
        body["context"] = context.id if isinstance(context, CodeContext) else context
    if language:
        body["language"] = language
    if env:
        body["env"] = dict(env)
    if timeout is not None:
        body["timeout_ms"] = -1 if timeout <= 0 else max(1, int(timeout * 1000))
    return body


class _Decoder:
    """Folds the NDJSON events of /code/run/stream into an Execution,
    calling the handlers as events arrive."""

    def __init__(self, on_stdout: Handler, on_stderr: Handler, on_result: Handler, on_error: Handler) -> None:
        self.on = {"stdout": on_stdout, "stderr": on_stderr, "result": on_result, "error": on_error}
        self.ex = Execution()
        self.pending = b""
        self.done = False

    def feed(self, chunk: bytes) -> List[Any]:
        self.pending += chunk
        out: List[Any] = []
        while b"\n" in self.pending and not self.done:
            line, self.pending = self.pending.split(b"\n", 1)
            if line.strip():
                out.extend(self.event(json.loads(line)))
        return out

    def event(self, ev: Dict[str, Any]) -> List[Any]:
        kind, ex = ev.get("type"), self.ex
        arg: Any = None
        if kind in ("stdout", "stderr"):
            arg = ev.get("text", "")
            getattr(ex.logs, kind).append(arg)
        elif kind == "result":
            arg = Result.from_dict(ev)
            ex.results.append(arg)
        elif kind == "error":
            arg = ExecutionError(ev.get("name", ""), ev.get("value", ""), ev.get("traceback", ""))
            ex.error = arg
        elif kind == "number_of_executions":
            ex.execution_count = ev.get("execution_count")
        elif kind == "end_of_execution":
            ex.status = ev.get("status", "")
            ex.duration_ms = float(ev.get("duration_ms", 0.0))
            ex.restarted = bool(ev.get("restarted", False))
            ex.context = ev.get("context", "")
            if ev.get("execution_count"):
                ex.execution_count = ev["execution_count"]
            self.done = True
        cb = self.on.get(kind or "")
        return [cb(arg)] if cb is not None else []

    def finish(self) -> Execution:
        if not self.done:
            raise UnavailableError("the code stream ended before end_of_execution; the daemon or the sandbox may "
                                   "have gone away")
        return self.ex


class CodeInterpreter:
    """``Sandbox``'s code interpreter methods."""

    id: str
    _http: Any

    def run_code(self, code: str, language: Optional[str] = None, context: Optional[ContextRef] = None,
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
        with self._http.stream("POST", sandbox_path(self.id, "/code/run/stream"), json_body=body) as resp:
            for chunk in resp.iter_raw():
                dec.feed(chunk)
                if dec.done:
                    break
        return dec.finish()

    def create_code_context(self, language: str = "python", cwd: Optional[str] = None,
                            env: Optional[Dict[str, str]] = None, user: Optional[str] = None,
                            id: Optional[str] = None) -> CodeContext:
        """Start a code context: a kernel with its own state."""
        body = {k: v for k, v in {"language": language, "cwd": cwd, "env": env, "user": user, "id": id}.items() if v}
        return CodeContext.from_dict(self._http.json("POST", sandbox_path(self.id, "/code/contexts"), json_body=body))

    def list_code_contexts(self) -> List[CodeContext]:
        d = self._http.json("GET", sandbox_path(self.id, "/code/contexts"))
        return [CodeContext.from_dict(c) for c in d.get("contexts") or []]

    def remove_code_context(self, context: ContextRef) -> None:
        self._http.request("DELETE", sandbox_path(self.id, "/code/contexts/" + _ctx_id(context)))

    def restart_code_context(self, context: ContextRef) -> CodeContext:
        """Replace the context's kernel with a fresh one: its state is lost."""
        path = sandbox_path(self.id, "/code/contexts/" + _ctx_id(context) + "/restart")
        return CodeContext.from_dict(self._http.json("POST", path))

    def interrupt_code_context(self, context: ContextRef) -> CodeContext:
        """Interrupt the context's running cell; its state is kept."""
        path = sandbox_path(self.id, "/code/contexts/" + _ctx_id(context) + "/interrupt")
        return CodeContext.from_dict(self._http.json("POST", path))


class AsyncCodeInterpreter:
    """``AsyncSandbox``'s code interpreter methods; handlers may be
    coroutine functions (awaited in order)."""

    id: str
    _http: Any

    async def run_code(self, code: str, language: Optional[str] = None, context: Optional[ContextRef] = None,
                       env: Optional[Dict[str, str]] = None, timeout: Optional[float] = None,
                       on_stdout: Handler = None, on_stderr: Handler = None, on_result: Handler = None,
                       on_error: Handler = None) -> Execution:
        """See ``Sandbox.run_code``."""
        body = _run_body(code, language, context, env, timeout)
        dec = _Decoder(on_stdout, on_stderr, on_result, on_error)
        async with self._http.stream("POST", sandbox_path(self.id, "/code/run/stream"), json_body=body) as resp:
            async for chunk in resp.aiter_raw():
                for r in dec.feed(chunk):
                    if inspect.isawaitable(r):
                        await r
                if dec.done:
                    break
        return dec.finish()

    async def create_code_context(self, language: str = "python", cwd: Optional[str] = None,
                                  env: Optional[Dict[str, str]] = None, user: Optional[str] = None,
                                  id: Optional[str] = None) -> CodeContext:
        body = {k: v for k, v in {"language": language, "cwd": cwd, "env": env, "user": user, "id": id}.items() if v}
        return CodeContext.from_dict(
            await self._http.json("POST", sandbox_path(self.id, "/code/contexts"), json_body=body))

    async def list_code_contexts(self) -> List[CodeContext]:
        d = await self._http.json("GET", sandbox_path(self.id, "/code/contexts"))
        return [CodeContext.from_dict(c) for c in d.get("contexts") or []]

    async def remove_code_context(self, context: ContextRef) -> None:
        await self._http.request("DELETE", sandbox_path(self.id, "/code/contexts/" + _ctx_id(context)))

    async def restart_code_context(self, context: ContextRef) -> CodeContext:
        path = sandbox_path(self.id, "/code/contexts/" + _ctx_id(context) + "/restart")
        return CodeContext.from_dict(await self._http.json("POST", path))

    async def interrupt_code_context(self, context: ContextRef) -> CodeContext:
        path = sandbox_path(self.id, "/code/contexts/" + _ctx_id(context) + "/interrupt")
        return CodeContext.from_dict(await self._http.json("POST", path))
