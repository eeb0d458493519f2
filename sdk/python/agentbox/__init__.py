"""agentbox: disposable, isolated Linux sandboxes for AI agents.

::

    from agentbox import Sandbox

    with Sandbox.create(template="base", ttl_seconds=300) as sbx:
        r = sbx.exec("python3 -c 'print(sum(range(101)))'")
        print(r.stdout, r.exit_code)   # 5050 0

``AsyncSandbox`` offers the same with ``async``/``await``. Errors are the
typed classes of ``agentbox.errors``.
"""

from .async_sandbox import AsyncClient, AsyncDesktop, AsyncFiles, AsyncProcess, AsyncSandbox
from ._pty import AsyncPty, Pty
from .errors import (AgentboxError, ConflictError, InternalError, InvalidArgumentError, NotFoundError,
                     NotSupportedError, PermissionDeniedError, ResourceExhaustedError, TimeoutError,
                     UnauthorizedError, UnavailableError)
from .models import (ExecResult, FileInfo, FleetNode, Health, NodeStatus, PoolStatus, ProcessInfo, ProcessOutput, PushResult,
                     Resources, SandboxInfo, SandboxPage, Snapshot, Template)
from .sandbox import Client, Desktop, Files, Process, Sandbox
from .code import CodeContext, Execution, ExecutionError, Logs, Result
from .desktop import ActionsResult, DesktopInfo, PNGImage, Window

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "AsyncSandbox", "Client", "AsyncClient", "Files", "AsyncFiles", "Process", "AsyncProcess",
    "Pty", "AsyncPty", "ExecResult", "FileInfo", "Health", "PoolStatus", "ProcessInfo", "ProcessOutput", "Resources",
    "SandboxInfo", "SandboxPage", "Snapshot", "Template", "PushResult", "NodeStatus", "FleetNode",
    "AgentboxError", "NotFoundError", "InvalidArgumentError",
    "UnauthorizedError", "PermissionDeniedError", "TimeoutError", "ConflictError", "ResourceExhaustedError",
    "UnavailableError", "InternalError", "NotSupportedError",
    "CodeContext", "Execution", "ExecutionError", "Logs", "Result",
    "Desktop", "AsyncDesktop", "DesktopInfo", "Window", "ActionsResult", "PNGImage",
]
