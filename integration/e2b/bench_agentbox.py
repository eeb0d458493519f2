"""Sandbox.create() + exec('echo hi') + destroy() through agentbox's Python
SDK: the line `agentbox bench` prints beside bench.mjs's
(internal/bench/e2b.go). Timed per round after 2 warm-up rounds; prints
{"samples_ms": [...]} in ms. Needs sdk/python on PYTHONPATH (or
installed), AGENTBOX_HOST and AGENTBOX_API_KEY."""
import json
import os
import sys
import time

from agentbox import Sandbox

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
template = os.environ.get("E2B_BENCH_TEMPLATE", "base")
times = []
for i in range(n + 2):
    t = time.perf_counter()
    sbx = Sandbox.create(template=template)
    r = sbx.exec("echo hi")
    if r.stdout != "hi\n":
        raise SystemExit("unexpected output %r" % r.stdout)
    sbx.destroy()
    if i >= 2:
        times.append((time.perf_counter() - t) * 1000)
print(json.dumps({"samples_ms": times}))
