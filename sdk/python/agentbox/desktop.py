"""The desktop for computer-use agents: an X display in the sandbox driven
by screenshots, mouse and keyboard actions, with a live view.

::

    with Sandbox.create(template="desktop", memory_mb=2048) as sbx:
        sbx.desktop.start(width=1024, height=768)
        sbx.desktop.open("https://example.org/")
        png = sbx.desktop.screenshot()
        sbx.desktop.click(200, 150)
        sbx.desktop.type("hello")
        sbx.desktop.press("Return")

``sbx.desktop`` is a ``Desktop`` (``AsyncDesktop`` on an ``AsyncSandbox``,
written once in async_sandbox.py). These are its answers and the helpers
that build its requests. See docs/desktop.md.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from itertools import accumulate
from datetime import datetime
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .errors import InvalidArgumentError
from .models import parse_time

_ADD = bytes(range(256)) * 2  # (a + b) & 255 for a + b < 512

Point = Union[Tuple[int, int], Dict[str, int]]
ScreenshotSpec = Union[bool, Dict[str, Any]]


@dataclass
class DesktopInfo:
    """The display's state: ``state`` is "stopped", "starting", "running"
    or "failed" (then ``error`` says why)."""

    state: str
    display: str = ""
    width: int = 0
    height: int = 0
    dpi: int = 0
    stream_port: int = 0
    started_at: Optional[datetime] = None
    error: str = ""
    processes: Dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "DesktopInfo":
        return cls(state=d.get("state", ""), display=d.get("display") or "", width=int(d.get("width") or 0),
                   height=int(d.get("height") or 0), dpi=int(d.get("dpi") or 0),
                   stream_port=int(d.get("stream_port") or 0), started_at=parse_time(d.get("started_at")),
                   error=d.get("error") or "", processes=dict(d.get("processes") or {}))


@dataclass
class Window:
    """A top-level window; ``app`` is its WM_CLASS class (e.g. "Chromium")."""

    id: int
    title: str
    app: str = ""
    pid: int = 0
    x: int = 0
    y: int = 0
    width: int = 0
    height: int = 0
    focused: bool = False

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Window":
        return cls(id=int(d.get("id", 0)), title=d.get("title") or "", app=d.get("app") or "",
                   pid=int(d.get("pid") or 0), x=int(d.get("x") or 0), y=int(d.get("y") or 0),
                   width=int(d.get("width") or 0), height=int(d.get("height") or 0),
                   focused=bool(d.get("focused")))


@dataclass
class ActionsResult:
    """What ``actions`` answers: where the pointer ended, and the
    screenshot taken after the last action when one was asked for."""

    cursor: Tuple[int, int]
    screenshot: Optional[bytes] = None
    screenshot_format: str = ""
    screenshot_size: Tuple[int, int] = (0, 0)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ActionsResult":
        c = d.get("cursor") or {}
        r = cls(cursor=(int(c.get("x", 0)), int(c.get("y", 0))))
        s = d.get("screenshot")
        if s:
            r.screenshot = base64.b64decode(s.get("data") or "")
            r.screenshot_format = s.get("format") or ""
            r.screenshot_size = (int(s.get("width") or 0), int(s.get("height") or 0))
        return r


def start_body(width: Optional[int], height: Optional[int], dpi: Optional[int]) -> Dict[str, Any]:
    return {k: v for k, v in (("width", width), ("height", height), ("dpi", dpi)) if v is not None}


def _region(region: Optional[Sequence[int]]) -> Optional[Dict[str, int]]:
    if region is None:
        return None
    if len(region) != 4:
        raise InvalidArgumentError(f"region is (x, y, w, h), got {region!r}")
    x, y, w, h = (int(v) for v in region)
    return {"x": x, "y": y, "w": w, "h": h}


def _scale(scale: Union[None, str, float, Tuple[int, int]]) -> Optional[str]:
    if scale is None:
        return None
    if isinstance(scale, tuple):
        return f"{int(scale[0])}x{int(scale[1])}"
    return str(scale)


def screenshot_options(format: str = "png", quality: Optional[int] = None,
                       scale: Union[None, str, float, Tuple[int, int]] = None,
                       region: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """ScreenshotOptions as the actions body takes them."""
    o: Dict[str, Any] = {"format": format}
    if quality is not None:
        o["quality"] = int(quality)
    if scale is not None:
        o["scale"] = _scale(scale)
    r = _region(region)
    if r is not None:
        o["region"] = r
    return o


def screenshot_params(format: str = "png", quality: Optional[int] = None,
                      scale: Union[None, str, float, Tuple[int, int]] = None,
                      region: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The same options as GET /desktop/screenshot's query."""
    o = screenshot_options(format, quality, scale, region)
    r = o.pop("region", None)
    if r:
        o.update(r)
    return o


def point(p: Point) -> Dict[str, int]:
    if isinstance(p, dict):
        return {"x": int(p["x"]), "y": int(p["y"])}
    x, y = p
    return {"x": int(x), "y": int(y)}


def actions_body(actions: Sequence[Dict[str, Any]], screenshot: ScreenshotSpec) -> Dict[str, Any]:
    body: Dict[str, Any] = {"actions": [dict(a) for a in actions]}
    for a in body["actions"]:
        if "type" not in a:
            raise InvalidArgumentError(f"an action needs a type (move, click, type, key, ...): {a!r}")
        if "path" in a:
            a["path"] = [point(p) for p in a["path"]]
    if screenshot is True:
        body["screenshot"] = {}
    elif isinstance(screenshot, dict):
        body["screenshot"] = screenshot_options(**screenshot)
    return body


def click_action(x: Optional[int], y: Optional[int], button: str, double: bool) -> Dict[str, Any]:
    a: Dict[str, Any] = {"type": "click", "button": button}
    if x is not None or y is not None:
        if x is None or y is None:
            raise InvalidArgumentError("click takes both x and y, or neither (where the pointer is)")
        a["x"], a["y"] = int(x), int(y)
    if double:
        a["double"] = True
    return a


def launch_body(app: Union[str, Sequence[str]], env: Optional[Dict[str, str]], cwd: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"app": app} if isinstance(app, str) else {"cmd": list(app)}
    if env:
        body["env"] = dict(env)
    if cwd:
        body["cwd"] = cwd
    return body


def windows_of(d: Dict[str, Any]) -> List[Window]:
    return [Window.from_dict(w) for w in d.get("windows") or []]


class PNGImage:
    """A decoded PNG screenshot (8-bit RGB or RGBA, as the desktop sends
    them), for scripts that look at pixels without an imaging library::

        img = PNGImage.decode(sbx.desktop.screenshot())
        img.pixel(10, 20)                 # (r, g, b)
        box = img.find((255, 0, 255))     # (x0, y0, x1, y1) or None
    """

    def __init__(self, width: int, height: int, channels: int, rows: List[bytes]) -> None:
        self.width = width
        self.height = height
        self._channels = channels
        self._rows = rows

    @classmethod
    def decode(cls, data: bytes) -> "PNGImage":
        import struct
        import zlib

        if data[:8] != b"\x89PNG\r\n\x1a\n":
            raise InvalidArgumentError("not a PNG")
        pos, idat, hdr = 8, [], None
        while pos < len(data):
            n, kind = struct.unpack(">I4s", data[pos:pos + 8])
            chunk = data[pos + 8:pos + 8 + n]
            pos += 12 + n
            if kind == b"IHDR":
                hdr = struct.unpack(">IIBBBBB", chunk)
            elif kind == b"IDAT":
                idat.append(chunk)
            elif kind == b"IEND":
                break
        if hdr is None:
            raise InvalidArgumentError("a PNG without IHDR")
        w, h, depth, ctype, _, _, interlace = hdr
        if depth != 8 or ctype not in (2, 6) or interlace:
            raise InvalidArgumentError(f"only 8-bit RGB/RGBA non-interlaced PNGs, got depth {depth} type {ctype}")
        bpp = 3 if ctype == 2 else 4
        raw = zlib.decompress(b"".join(idat))
        stride = w * bpp
        rows: List[bytes] = []
        prev = bytearray(stride)
        for y in range(h):
            f = raw[y * (stride + 1)]
            line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
            if f == 1:
                for c in range(bpp):
                    line[c::bpp] = bytes(accumulate(line[c::bpp], lambda a, b: (a + b) & 255))
            elif f == 2:
                line = bytearray(map(_ADD.__getitem__, map(int.__add__, line, prev)))
            elif f == 3:
                for i in range(stride):
                    left = line[i - bpp] if i >= bpp else 0
                    line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
            elif f == 4:
                for i in range(stride):
                    a = line[i - bpp] if i >= bpp else 0
                    b = prev[i]
                    c = prev[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                    line[i] = (line[i] + pred) & 255
            rows.append(bytes(line))
            prev = line
        return cls(w, h, bpp, rows)

    def pixel(self, x: int, y: int) -> Tuple[int, int, int]:
        """The (r, g, b) at x, y."""
        i = x * self._channels
        r = self._rows[y]
        return r[i], r[i + 1], r[i + 2]

    def find(self, rgb: Tuple[int, int, int], tolerance: int = 12) -> Optional[Tuple[int, int, int, int]]:
        """The bounding box (x0, y0, x1, y1), x1 and y1 exclusive, of the
        pixels within ``tolerance`` of ``rgb`` in each channel; None if none."""
        # Per row, three byte masks (near R, near G, near B) as integers,
        # shifted so that a pixel's three bytes line up: the rows without
        # a match cost a few C-level operations, not a loop over pixels.
        tables = [bytes(1 if abs(v - want) < tolerance else 0 for v in range(256)) for want in rgb[:3]]
        ch = self._channels
        box = None
        for y, row in enumerate(self._rows):
            n = len(row)
            m = (int.from_bytes(row.translate(tables[0]), "big")
                 & (int.from_bytes(row.translate(tables[1]), "big") << 8)
                 & (int.from_bytes(row.translate(tables[2]), "big") << 16))
            if not m:
                continue
            hits = m.to_bytes(n, "big")
            xs = [i // ch for i in range(0, n, ch) if hits[i]]
            if not xs:
                continue
            if box is None:
                box = [xs[0], y, xs[-1] + 1, y + 1]
            else:
                box[0], box[2] = min(box[0], xs[0]), max(box[2], xs[-1] + 1)
                box[3] = y + 1
        return tuple(box) if box else None  # type: ignore[return-value]
