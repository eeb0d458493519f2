#!/usr/bin/env python3
"""A code interpreter session: CSV -> pandas -> chart, through run_code only.

    python3 examples/code_interpreter.py [--template python] [--out chart.png]

Each run_code call is a cell in a live Jupyter kernel in the sandbox: the
DataFrame made in one cell is there in the next, and the chart comes back
as a PNG result (no files to download). The `python` template carries
ipykernel, pandas and matplotlib; build and import it once with
`sudo scripts/build-template.sh python`. See docs/interpreter.md.
Needs the agentbox SDK (pip install ./sdk/python, or PYTHONPATH=sdk/python)
and a daemon (AGENTBOX_HOST / AGENTBOX_API_KEY, or root on its host).
"""

import argparse
import base64
import sys

from agentbox import Sandbox
from agentbox.errors import AgentboxError

CSV = "\n".join(["month,region,revenue"] + [
    f"2024-{m:02d},{r},{100 + 7 * m + 13 * i + (m * i) % 5}"
    for m in range(1, 13) for i, r in enumerate(["north", "south", "west"])
]) + "\n"


def cell(sbx, code):
    """Run one cell, echo its output, stop on an error."""
    ex = sbx.run_code(code, on_stdout=lambda s: print(s, end=""))
    if ex.error:
        print(ex.error.traceback, file=sys.stderr)
        sys.exit(1)
    return ex


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--template", default="python")
    ap.add_argument("--out", default="chart.png")
    args = ap.parse_args()
    try:
        with Sandbox.create(template=args.template, ttl_seconds=600) as sbx:
            # 1. the data, written by the kernel itself (repr() makes a literal)
            cell(sbx, f"open('/tmp/sales.csv', 'w').write({CSV!r});")
            # 2. pandas: state stays in the kernel between cells
            cell(sbx, "import pandas as pd\n"
                      "df = pd.read_csv('/tmp/sales.csv')\n"
                      "print(f'rows: {len(df)}')")
            ex = cell(sbx, "totals = df.groupby('region')['revenue'].sum()\ntotals")
            print("revenue by region:\n" + (ex.text or ""))
            # 3. a chart: matplotlib's inline backend sends it as a PNG result
            ex = cell(sbx, "import matplotlib.pyplot as plt\n"
                           "df.pivot(index='month', columns='region', values='revenue').plot(figsize=(8, 4), marker='o')\n"
                           "plt.title('Monthly revenue by region'); plt.tight_layout(); plt.show()")
            pngs = [r.png for r in ex.results if r.png]
            if not pngs:
                print("no chart came back: results " + ", ".join(str(r.formats()) for r in ex.results), file=sys.stderr)
                return 1
            with open(args.out, "wb") as f:
                f.write(base64.b64decode(pngs[0]))
            print(f"chart: {args.out} (execution {ex.execution_count}, {ex.duration_ms:.0f} ms)")
    except AgentboxError as e:
        if "no Jupyter kernel" in str(e):
            print(f"{e}\nuse a template with ipykernel: --template python", file=sys.stderr)
        else:
            print(f"agentbox: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
