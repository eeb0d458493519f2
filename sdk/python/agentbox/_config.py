"""Where the daemon is and which key to send, resolved like the Go SDK
(client/client.go): arguments win over AGENTBOX_HOST / AGENTBOX_API_KEY;
as root with neither set, the local unix socket and the admin key file."""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from .errors import InvalidArgumentError, PermissionDeniedError

DEFAULT_SOCKET_PATH = "/run/agentbox/agentbox.sock"
DEFAULT_HTTP_HOST = "http://127.0.0.1:7423"
DEFAULT_ADMIN_KEY_PATH = "/var/lib/agentbox/admin.key"
ENV_HOST = "AGENTBOX_HOST"
ENV_API_KEY = "AGENTBOX_API_KEY"


@dataclass(frozen=True)
class Config:
    """A resolved connection: ``base_url`` for HTTP requests (a placeholder
    host when ``socket`` is set), the unix ``socket`` path or None, the
    ``host`` as the user named it, and the ``api_key`` (may be empty)."""

    base_url: str
    socket: Optional[str]
    host: str
    api_key: str


def parse_host(host: str) -> "tuple[str, Optional[str]]":
    """Turn a host setting into (base URL, unix socket path or None)."""
    host = host.strip()
    if host.startswith("unix://"):
        path = host[len("unix://"):]
        if not path.startswith("/"):
            raise InvalidArgumentError(
                f"{ENV_HOST}: a unix socket host wants an absolute path, like "
                f"unix:///run/agentbox/agentbox.sock, got {host!r}")
        return "http://agentbox", path
    if host.startswith("tcp://"):
        host = "http://" + host[len("tcp://"):]
    elif "://" in host and not host.startswith(("http://", "https://")):
        raise InvalidArgumentError(
            f"{ENV_HOST}: unsupported scheme in {host!r}; use unix://, http://, https:// or host:port")
    elif "://" not in host:
        host = "http://" + host
    u = urlsplit(host)
    if not u.netloc:
        raise InvalidArgumentError(
            f"{ENV_HOST}: cannot parse {host!r} as an address; use unix:///path, http://host:port or host:port")
    return f"{u.scheme}://{u.netloc}{u.path}".rstrip("/"), None


def _is_loopback(base_url: str) -> bool:
    h = urlsplit(base_url).hostname or ""
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def resolve(api_key: Optional[str] = None, base_url: Optional[str] = None, *,
            socket_path: str = DEFAULT_SOCKET_PATH,
            admin_key_path: str = DEFAULT_ADMIN_KEY_PATH) -> Config:
    """Resolve the daemon's address and the API key.

    The host comes from ``base_url``, else ``AGENTBOX_HOST``; as root with
    neither, the local socket if it exists, else http://127.0.0.1:7423. The
    key comes from ``api_key``, else ``AGENTBOX_API_KEY``; as root with
    neither, the admin key file, read only for a daemon on this machine (a
    unix socket or a loopback address). ``AGENTBOX_API_KEY`` set but empty
    raises InvalidArgumentError: it never falls back to the admin key.
    """
    host = base_url or os.environ.get(ENV_HOST, "")
    key = api_key
    if key is None:
        env = os.environ.get(ENV_API_KEY)
        # Set but empty is a mistake (a script whose `key create` failed),
        # never a reason to fall back to the admin key.
        if env is not None and not env.strip():
            raise InvalidArgumentError(
                f"{ENV_API_KEY} is set but empty (did the command that made the key fail?); "
                "set it to an API key, or unset it to use the admin key as root on the daemon's host")
        key = env or ""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    if not host:
        host = DEFAULT_HTTP_HOST
        if root:
            try:
                if stat.S_ISSOCK(os.stat(socket_path).st_mode):
                    host = "unix://" + socket_path
            except OSError:
                pass
    base, sock = parse_host(host)
    if not key and root and admin_key_path and (sock or _is_loopback(base)):
        try:
            with open(admin_key_path, encoding="utf-8") as f:
                key = f.read().strip()
        except FileNotFoundError:
            pass
        except OSError as e:
            raise PermissionDeniedError(f"reading admin key {admin_key_path}: {e}") from e
    return Config(base_url=base, socket=sock, host=host, api_key=key)

