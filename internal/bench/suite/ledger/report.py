import csv
import io
import json
from decimal import Decimal

from ledger.core import Ledger, Posting, Transaction


def balances(ledger, depth=None):
    out = {}
    for t in ledger.transactions:
        for p in t.postings:
            name = p.account
            if depth:
                name = ":".join(name.split(":")[:depth])
            key = (name, p.commodity)
            out[key] = out.get(key, Decimal(0)) + p.amount
    return {k: v for k, v in sorted(out.items()) if v != 0}


def register(ledger, account):
    running, rows = Decimal(0), []
    for t in ledger.transactions:
        for p in t.postings:
            if p.account == account or p.account.startswith(account + ":"):
                running += p.amount
                rows.append((t.date.isoformat(), t.payee, p.amount, running))
    return rows


def to_csv(ledger):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["date", "payee", "account", "amount", "commodity"])
    for t in ledger.transactions:
        for p in t.postings:
            w.writerow([t.date.isoformat(), t.payee, p.account,
                        str(p.amount), p.commodity])
    return buf.getvalue()


def to_json(ledger):
    return json.dumps([
        {"date": t.date.isoformat(), "payee": t.payee,
         "postings": [[p.account, str(p.amount), p.commodity]
                      for p in t.postings]}
        for t in ledger.transactions], indent=1)


def from_json(text):
    return Ledger(Transaction(d["date"], d["payee"],
                              [Posting(a, v, c) for a, v, c in d["postings"]])
                  for d in json.loads(text))
