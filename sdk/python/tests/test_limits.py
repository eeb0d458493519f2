"""Per-sandbox connection and bandwidth limits through the SDK
(docs/network.md): set at create, changed with set_egress."""

import asyncio

from conftest import TEMPLATE

from agentbox import AsyncSandbox, Sandbox


def test_limits_at_create_and_runtime():
    with Sandbox.create(template=TEMPLATE, ttl_seconds=300,
                        network={"egress": "internet", "max_connections": 4, "bandwidth_mbit": 8}) as s:
        n = s.info().network
        assert n["max_connections"] == 4 and n["bandwidth_mbit"] == 8, n
        # 0 keeps a limit, -1 removes it; the policy is what is sent.
        info = s.set_egress("internet", deny=["203.0.113.0/24"], bandwidth_mbit=-1)
        assert info.network["max_connections"] == 4, info.network
        assert info.network["bandwidth_mbit"] == -1, info.network
        assert info.network["deny"] == ["203.0.113.0/24"], info.network


def test_async_limits():
    async def run():
        s = await AsyncSandbox.create(template=TEMPLATE, ttl_seconds=300, network={"egress": "internet"})
        try:
            info = await s.set_egress("internet", max_connections=16, bandwidth_mbit=2)
            assert info.network["max_connections"] == 16 and info.network["bandwidth_mbit"] == 2, info.network
        finally:
            await s.destroy()
            await s.close()
    asyncio.run(run())
