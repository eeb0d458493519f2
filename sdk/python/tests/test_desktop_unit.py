"""The desktop's request builders and PNGImage, without a daemon."""

import struct
import zlib

import pytest

from agentbox import PNGImage
from agentbox import desktop
from agentbox.errors import InvalidArgumentError


def _png(w, h, rows, ctype=2):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_png_filters():
    # Row 0 unfiltered, row 1 "up" (+1 each), row 2 "sub", row 3 paeth.
    rows = [b"\x00" + bytes([10, 20, 30, 255, 0, 255]),
            b"\x02" + bytes([1, 1, 1, 0, 0, 0]),
            b"\x01" + bytes([5, 5, 5, 1, 1, 1]),
            b"\x04" + bytes([0, 0, 0, 0, 0, 0])]
    img = PNGImage.decode(_png(2, 4, rows))
    assert (img.width, img.height) == (2, 4)
    assert img.pixel(0, 0) == (10, 20, 30) and img.pixel(1, 0) == (255, 0, 255)
    assert img.pixel(0, 1) == (11, 21, 31) and img.pixel(1, 1) == (255, 0, 255)
    assert img.pixel(0, 2) == (5, 5, 5) and img.pixel(1, 2) == (6, 6, 6)
    assert img.pixel(0, 3) == (5, 5, 5) and img.pixel(1, 3) == (6, 6, 6)
    assert img.find((255, 0, 255)) == (1, 0, 2, 2)
    assert img.find((100, 100, 100)) is None
    with pytest.raises(InvalidArgumentError):
        PNGImage.decode(b"GIF89a")


def test_request_builders():
    assert desktop.start_body(800, None, None) == {"width": 800}
    assert desktop.click_action(None, None, "left", False) == {"type": "click", "button": "left"}
    assert desktop.click_action(1, 2, "right", True) == {"type": "click", "button": "right", "x": 1, "y": 2,
                                                         "double": True}
    with pytest.raises(InvalidArgumentError):
        desktop.click_action(1, None, "left", False)
    assert desktop.screenshot_params("jpeg", 50, (512, 384), (1, 2, 3, 4)) == {
        "format": "jpeg", "quality": 50, "scale": "512x384", "x": 1, "y": 2, "w": 3, "h": 4}
    assert desktop.screenshot_params(scale=0.5) == {"format": "png", "scale": "0.5"}
    body = desktop.actions_body([{"type": "drag", "path": [(1, 2), {"x": 3, "y": 4}]}], True)
    assert body == {"actions": [{"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}], "screenshot": {}}
    assert desktop.actions_body([], {"format": "jpeg"})["screenshot"] == {"format": "jpeg"}
    with pytest.raises(InvalidArgumentError):
        desktop.actions_body([{"x": 1}], False)
    assert desktop.launch_body("terminal", None, None) == {"app": "terminal"}
    assert desktop.launch_body(["xterm", "-e", "top"], {"A": "1"}, "/tmp") == {
        "cmd": ["xterm", "-e", "top"], "env": {"A": "1"}, "cwd": "/tmp"}
