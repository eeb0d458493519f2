import datetime
import unittest
from decimal import Decimal

from ledger import Posting, Transaction, Ledger, LedgerError


def tx(date, payee, *posts):
    return Transaction(date, payee, [Posting(*p) for p in posts])


class PostingTest(unittest.TestCase):
    def test_amount_is_decimal(self):
        self.assertEqual(Posting("assets:bank", "1.10").amount, Decimal("1.10"))

    def test_unknown_root(self):
        with self.assertRaises(LedgerError):
            Posting("savings:bank", "1")

    def test_empty_account(self):
        with self.assertRaises(LedgerError):
            Posting("", "1")

    def test_equality(self):
        self.assertEqual(Posting("income:x", "2"), Posting("income:x", "2.0"))
        self.assertNotEqual(Posting("income:x", "2"), Posting("income:x", "2", "USD"))


class TransactionTest(unittest.TestCase):
    def test_balanced(self):
        t = tx("2024-01-02", "rent", ("expenses:rent", "800"), ("assets:bank", "-800"))
        self.assertEqual(t.date, datetime.date(2024, 1, 2))

    def test_unbalanced(self):
        with self.assertRaisesRegex(LedgerError, "unbalanced"):
            tx("2024-01-02", "x", ("expenses:a", "1"), ("assets:b", "-2"))

    def test_inferred_amount(self):
        t = tx("2024-01-02", "x", ("expenses:a", "1.25"), ("expenses:b", "2"), ("assets:b", None))
        self.assertEqual(t.postings[2].amount, Decimal("-3.25"))

    def test_two_missing(self):
        with self.assertRaises(LedgerError):
            tx("2024-01-02", "x", ("expenses:a", "1"), ("assets:b", None), ("assets:c", None))

    def test_one_posting(self):
        with self.assertRaises(LedgerError):
            tx("2024-01-02", "x", ("expenses:a", "0"))

    def test_commodities_balance_apart(self):
        tx("2024-01-02", "fx", ("assets:eur", "10"), ("equity:fx", "-10"),
           ("assets:usd", "-11", "USD"), ("equity:fx", "11", "USD"))

    def test_cannot_infer_across_commodities(self):
        with self.assertRaises(LedgerError):
            tx("2024-01-02", "x", ("assets:eur", "10"), ("assets:usd", "-11", "USD"), ("equity:fx", None))


class LedgerTest(unittest.TestCase):
    def setUp(self):
        self.led = Ledger()
        for day in range(28, 0, -1):
            self.led.add(tx("2024-02-%02d" % day, "day %d" % day,
                            ("expenses:food", str(day)), ("assets:cash", None)))

    def test_sorted_by_date(self):
        dates = [t.date for t in self.led.transactions]
        self.assertEqual(dates, sorted(dates))

    def test_accounts(self):
        self.assertEqual(self.led.accounts(), ["assets:cash", "expenses:food"])

    def test_between(self):
        part = self.led.between(datetime.date(2024, 2, 10), datetime.date(2024, 2, 20))
        self.assertEqual(len(part), 10)

    def test_between_open_ended(self):
        self.assertEqual(len(self.led.between(start=datetime.date(2024, 2, 28))), 1)
        self.assertEqual(len(self.led.between(end=datetime.date(2024, 2, 2))), 1)


if __name__ == "__main__":
    unittest.main()
