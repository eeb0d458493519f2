"""Usage samples and the event stream (docs/observability.md)."""

import asyncio
import time

from conftest import TEMPLATE

from agentbox import AsyncClient, Client, Sandbox


def test_metrics_samples_the_sandbox():
    with Sandbox.create(template=TEMPLATE, ttl_seconds=300) as s:
        # The daemon samples every few seconds: wait (generously) for one.
        deadline = time.monotonic() + 60
        samples = s.metrics()
        while not samples and time.monotonic() < deadline:
            time.sleep(0.5)
            samples = s.metrics()
        assert samples, "no usage sample in 60 s"
        last = samples[-1]
        assert last["memory_bytes"] > 0 and last["pids"] >= 1, last
        for key in ("time", "cpu_seconds", "cpu_percent", "disk_bytes", "rx_bytes", "tx_bytes"):
            assert key in last, last


def test_events_iterator_sees_a_lifecycle():
    with Client().events(types=["created", "destroyed"]) as stream:
        s = Sandbox.create(template=TEMPLATE, ttl_seconds=300)
        s.destroy()
        mine = []
        for ev in stream:
            if ev.get("sandbox") == s.id:
                mine.append(ev["type"])
                if ev["type"] == "destroyed":
                    break
    assert mine == ["created", "destroyed"], mine


def test_async_events_filter_by_sandbox():
    async def run():
        client = AsyncClient()
        s = Sandbox.create(template=TEMPLATE, ttl_seconds=300)
        try:
            async with await client.events(sandbox=s.id) as st:
                s.pause()  # subscribed already: the event is not missed
                ev = await asyncio.wait_for(st.__anext__(), 60)
        finally:
            s.destroy()
        return ev, s.id

    ev, sid = asyncio.run(run())
    assert ev["type"] == "paused" and ev["sandbox"] == sid, ev


def test_sse_parser():
    from agentbox._events import _Parser
    p = _Parser()
    lines = [": subscribed", "", "id: 1", 'data: {"seq": 1, "type": "created"}', "",
             "event: dropped", 'data: {"dropped": 3}', "", "id: 5", 'data: {"seq": 5,', 'data: "type": "oom"}', ""]
    got = [ev for ev in (p.line(line) for line in lines) if ev is not None]
    assert got == [{"seq": 1, "type": "created"}, {"seq": 5, "type": "oom"}], got
    assert p.dropped == 3
