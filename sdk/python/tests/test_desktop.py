"""The desktop (sbx.desktop), blocking and asyncio, against the desktop
template: the test page (sdk/testdata/desktop/page.html) served in the
sandbox and opened in Chromium, its targets found by colour in
screenshots, driven by the SDK's methods and judged by the window's
title."""

import asyncio
import os
import struct
import time

import pytest

from agentbox import ActionsResult, AsyncSandbox, DesktopInfo, PNGImage, Sandbox, Window
from agentbox.errors import InvalidArgumentError

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "testdata", "desktop", "page.html")
PORT = 8124


@pytest.fixture(scope="module")
def desk():
    with Sandbox.create(template="desktop", memory_mb=2048, ttl_seconds=900,
                        metadata={"suite": "sdk-python"}) as s:
        info = s.desktop.start(width=1024, height=768)
        assert isinstance(info, DesktopInfo) and info.state == "running" and info.width == 1024
        yield s


def wait(what, fn, bound=60.0):
    deadline = time.monotonic() + bound
    last = None
    while time.monotonic() < deadline:
        ok, last = fn()
        if ok:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}; last seen {last!r}")


def title(sbx):
    for w in sbx.desktop.windows():
        assert isinstance(w, Window)
        if "chromium" in w.app.lower():
            return w.title[:-len(" - Chromium")] if w.title.endswith(" - Chromium") else w.title
    return None


def wait_title(sbx, want):
    wait(f"title {want!r}", lambda: (title(sbx) == want, title(sbx)))


def find(sbx, rgb):
    def look():
        box = PNGImage.decode(sbx.desktop.screenshot()).find(rgb)
        return box is not None and box[2] - box[0] > 10, box
    box = wait(f"colour {rgb} on screen", look)
    return (box[0] + box[2]) // 2, (box[1] + box[3]) // 2


def test_desktop_methods(desk):
    d = desk.desktop
    assert d.status().state == "running"
    png = d.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1024, 768)
    jpg = d.screenshot("jpeg", quality=50, scale=(512, 384))
    assert jpg[:2] == b"\xff\xd8"
    region = PNGImage.decode(d.screenshot(region=(0, 0, 100, 50)))
    assert (region.width, region.height) == (100, 50)

    with open(PAGE, "rb") as f:
        desk.files.write("/tmp/site/page.html", f.read())
    desk.start(["python3", "-m", "http.server", str(PORT), "--bind", "127.0.0.1", "--directory", "/tmp/site"])
    url = f"http://127.0.0.1:{PORT}/page.html"
    r = desk.exec(f"for i in $(seq 300); do python3 -c \"import urllib.request; urllib.request.urlopen('{url}')\" "
                  "2>/dev/null && exit 0; sleep 0.1; done; exit 1")
    assert r.exit_code == 0, r.stderr
    proc = d.open(url)
    assert proc.pid > 0
    wait_title(desk, "before")

    bx, by = find(desk, (255, 0, 255))
    d.click(bx, by)
    wait_title(desk, "clicked")
    assert d.cursor() == (bx, by)

    ix, iy = find(desk, (0, 255, 255))
    d.click(ix, iy)
    d.type("Grüße é € 日本語 ✓ done")
    wait_title(desk, "typed:Grüße é € 日本語 ✓ done")
    d.press("ctrl+a")
    d.press("BackSpace")
    wait_title(desk, "typed:")

    px, py = find(desk, (255, 255, 0))
    d.drag([(px, py), (px + 50, py + 25), {"x": px + 100, "y": py + 50}])
    wait_title(desk, "dragged:100,50")

    d.move(600, 500)
    d.scroll(600, 500, dy=5)
    wait_title(desk, "scrolled:down")

    r = d.actions([{"type": "move", "x": 10, "y": 10}, {"type": "wait", "ms": 5}], screenshot=True)
    assert isinstance(r, ActionsResult) and r.cursor == (10, 10)
    assert r.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and r.screenshot_size == (1024, 768)
    r = d.actions([{"type": "move", "x": 20, "y": 20}], screenshot={"format": "jpeg", "scale": "0.5"})
    assert r.screenshot_format == "jpeg" and r.screenshot_size == (512, 384)
    with pytest.raises(InvalidArgumentError):
        d.actions([{"x": 1}])

    assert "view_only=true" in d.stream_url() and "view_only=false" in d.stream_url(view_only=False)


def test_desktop_async(desk):
    async def main():
        a = await AsyncSandbox.connect(desk.id)
        try:
            info = await a.desktop.status()
            assert info.state == "running"
            png = await a.desktop.screenshot(scale=0.5)
            assert struct.unpack(">II", png[16:24]) == (512, 384)
            await a.desktop.move(33, 44)
            assert await a.desktop.cursor() == (33, 44)
            assert isinstance(await a.desktop.windows(), list)
            assert "6080-" in await a.desktop.stream_url()
        finally:
            await a.close()
    asyncio.run(main())
