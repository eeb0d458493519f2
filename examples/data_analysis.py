#!/usr/bin/env python3
"""Data analysis in a sandbox: upload a CSV, compute with pandas there,
draw a chart with matplotlib, download the PNG.

    python3 examples/data_analysis.py [--template python] [--out chart.png]

The `python` template carries pandas and matplotlib (sandboxes have no
internet to pip install them); build and import it once with
`sudo scripts/build-template.sh python`.
Needs the agentbox SDK (pip install ./sdk/python, or PYTHONPATH=sdk/python)
and a daemon (AGENTBOX_HOST / AGENTBOX_API_KEY, or root on its host).
"""

import argparse
import csv
import io
import math
import os
import sys
import time

from agentbox import Sandbox
from agentbox.errors import AgentboxError, NotFoundError


def sample_csv():
    """A year of daily sales for three regions, made up but deterministic."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["date", "region", "units", "price"])
    for day in range(365):
        month, dom = divmod(day, 30)
        date = f"2024-{min(month, 11) + 1:02d}-{min(dom, 27) + 1:02d}"
        for i, region in enumerate(["north", "south", "west"]):
            units = int(100 + 40 * math.sin((day + 30 * i) / 58.0) + (day * 7 + i * 13) % 17)
            price = round(9.5 + i * 1.25 + (day % 7) * 0.1, 2)
            w.writerow([date, region, units, price])
    return buf.getvalue()


# Runs in the sandbox: reads the CSV, prints a summary, writes the chart.
ANALYSIS = '''\
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

df = pd.read_csv("/data/sales.csv", parse_dates=["date"])
df["revenue"] = df["units"] * df["price"]
monthly = df.groupby([df["date"].dt.to_period("M"), "region"])["revenue"].sum().unstack()
print(f"rows: {len(df)}, regions: {df['region'].nunique()}, "
      f"total revenue: {df['revenue'].sum():,.2f}")
print("revenue by region:")
print(df.groupby("region")["revenue"].sum().round(2).to_string())
print("best month:", monthly.sum(axis=1).idxmax())

ax = monthly.plot(figsize=(8, 4), marker="o", title="Monthly revenue by region")
ax.set_xlabel("month")
ax.set_ylabel("revenue")
plt.tight_layout()
plt.savefig("/data/chart.png", dpi=100)
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", default="python", help="template with pandas and matplotlib (default: python)")
    ap.add_argument("--out", default="chart.png", help="where to save the chart (default: chart.png)")
    args = ap.parse_args()

    t0 = time.monotonic()
    try:
        sbx = Sandbox.create(template=args.template, ttl_seconds=300, metadata={"example": "data_analysis"})
    except NotFoundError as e:
        print(f"data_analysis: template \"{args.template}\" is missing ({e}).\n"
              f"Build and import it with: sudo scripts/build-template.sh {args.template}", file=sys.stderr)
        return 2
    except AgentboxError as e:
        print(f"data_analysis: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    with sbx:
        print(f"sandbox {sbx.id} (template {args.template}) ready in {time.monotonic() - t0:.2f}s")
        data = sample_csv()
        sbx.files.mkdir("/data")
        sbx.files.write("/data/sales.csv", data)
        sbx.files.write("/data/analyse.py", ANALYSIS)
        print(f"uploaded sales.csv ({len(data)} bytes)")
        t = time.monotonic()
        r = sbx.exec(["python3", "/data/analyse.py"], timeout=120)
        if r.exit_code != 0:
            print(f"data_analysis: the analysis failed (exit {r.exit_code}):\n{r.stderr}", file=sys.stderr)
            if "No module named" in r.stderr:
                print(f"template \"{args.template}\" lacks pandas/matplotlib: use --template python "
                      "(sudo scripts/build-template.sh python)", file=sys.stderr)
            return 1
        print(r.stdout, end="")
        print(f"analysis ran in {time.monotonic() - t:.2f}s")
        sbx.download("/data/chart.png", args.out)
    size = os.path.getsize(args.out)
    with open(args.out, "rb") as f:
        magic = f.read(8)
    if magic != b"\x89PNG\r\n\x1a\n":
        print(f"data_analysis: {args.out} is not a PNG (starts {magic!r})", file=sys.stderr)
        return 1
    print(f"chart saved to {args.out} ({size} bytes, PNG) in {time.monotonic() - t0:.2f}s total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
