import datetime
from decimal import Decimal


class LedgerError(ValueError):
    pass


class Posting:
    __slots__ = ("account", "amount", "commodity")

    def __init__(self, account, amount, commodity="EUR"):
        if not account or ":" not in account and account not in ROOTS:
            raise LedgerError("bad account %r" % (account,))
        if account.split(":")[0] not in ROOTS:
            raise LedgerError("account %r is under no root" % (account,))
        self.account = account
        self.amount = amount if amount is None else Decimal(amount)
        self.commodity = commodity

    def __eq__(self, other):
        return (self.account, self.amount, self.commodity) == (
            other.account, other.amount, other.commodity)

    def __repr__(self):
        return "Posting(%r, %r, %r)" % (
            self.account, self.amount, self.commodity)


ROOTS = ("assets", "liabilities", "equity", "income", "expenses")


class Transaction:
    def __init__(self, date, payee, postings):
        if isinstance(date, str):
            date = datetime.date.fromisoformat(date)
        self.date = date
        self.payee = payee
        self.postings = list(postings)
        self._balance()

    def _balance(self):
        if len(self.postings) < 2:
            raise LedgerError("a transaction needs two postings")
        missing = [p for p in self.postings if p.amount is None]
        if len(missing) > 1:
            raise LedgerError("more than one posting without an amount")
        sums = {}
        for p in self.postings:
            if p.amount is not None:
                sums[p.commodity] = sums.get(p.commodity, 0) + p.amount
        if missing:
            if len(sums) != 1:
                raise LedgerError("cannot infer an amount across commodities")
            (commodity, total), = sums.items()
            missing[0].amount = -total
            missing[0].commodity = commodity
            return
        for commodity, total in sums.items():
            if total != 0:
                raise LedgerError("unbalanced by %s %s" % (total, commodity))


class Ledger:
    def __init__(self, transactions=()):
        self.transactions = []
        for t in transactions:
            self.add(t)

    def add(self, t):
        self.transactions.append(t)
        self.transactions.sort(key=lambda t: t.date)

    def accounts(self):
        return sorted({p.account for t in self.transactions
                       for p in t.postings})

    def between(self, start=None, end=None):
        return Ledger(t for t in self.transactions
                      if (start is None or t.date >= start)
                      and (end is None or t.date < end))

    def __len__(self):
        return len(self.transactions)
