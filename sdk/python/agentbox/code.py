"""The code interpreter: stateful Jupyter kernels in the sandbox.

::

    with Sandbox.create(template="python") as sbx:
        sbx.run_code("x = 41")
        ex = sbx.run_code("x + 1")
        print(ex.text)                      # 42
        ex = sbx.run_code("import matplotlib.pyplot as plt; plt.plot([1, 3, 2]); plt.show()")
        png = ex.results[0].png             # base64 PNG

``Sandbox`` and ``AsyncSandbox`` get these methods from ``CodeInterpreter``
and ``AsyncCodeInterpreter`` (written once, in async_sandbox.py). See
docs/interpreter.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union
from urllib.parse import quote

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



def __getattr__(name: str) -> Any:
    # The mixins that give Sandbox and AsyncSandbox these methods live with
    # them (async_sandbox.py, and sandbox.py generated from it), which
    # import this module: they are looked up on first use.
    if name == "CodeInterpreter":
        from .sandbox import CodeInterpreter
        return CodeInterpreter
    if name == "AsyncCodeInterpreter":
        from .async_sandbox import AsyncCodeInterpreter
        return AsyncCodeInterpreter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
