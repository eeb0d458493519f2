"""Egress policy at runtime and the egress log (docs/network.md)."""

import asyncio

from conftest import TEMPLATE

from agentbox import AsyncSandbox, Sandbox


def test_domain_rules_set_egress_and_log():
    with Sandbox.create(template=TEMPLATE, ttl_seconds=300,
                        network={"egress": "custom", "allow": ["allowed.test"]}) as s:
        # The sandbox's resolver refuses a name no rule allows; the
        # query never leaves the host and the log says why.
        r = s.exec(["getent", "hosts", "denied.test"])
        assert r.exit_code != 0, r
        log = s.egress_log()
        denied = [e for e in log if e["kind"] == "dns" and e["name"] == "denied.test"]
        assert denied and denied[0]["verdict"] == "deny", log
        assert "no allow rule" in denied[0]["reason"], denied
        info = s.set_egress("custom", allow=["*.example.org"], deny=["10.0.0.0/8"])
        assert info.network["allow"] == ["*.example.org"], info.network
        assert info.network["deny"] == ["10.0.0.0/8"], info.network
        r = s.exec(["getent", "hosts", "allowed.test"])  # no longer allowed
        assert r.exit_code != 0, r
        assert any(e["name"] == "allowed.test" and e["verdict"] == "deny" for e in s.egress_log())


def test_async_egress_log():
    async def run():
        s = await AsyncSandbox.create(template=TEMPLATE, ttl_seconds=300,
                                      network={"egress": "internet", "deny": ["*.denied.test"]})
        try:
            r = await s.exec(["getent", "hosts", "a.denied.test"])
            assert r.exit_code != 0, r
            log = await s.egress_log()
            assert any(e["name"] == "a.denied.test" and e["reason"] == "deny *.denied.test" for e in log), log
            info = await s.set_egress("none")
            assert info.network.get("egress") == "none", info.network
        finally:
            await s.destroy()
            await s.close()
    asyncio.run(run())
