import os
import tempfile
import unittest
from decimal import Decimal

from ledger import parse, parse_file, ParseError

JOURNAL = """\
; a comment line
2024-03-01 salary
    assets:bank        2500.00
    income:salary

2024-03-02 groceries  ; trailing comment
    expenses:food        41.20
    expenses:household    8.80
    assets:bank

2024-03-05 trip
    assets:usd          -120 USD
    expenses:travel      120 USD
"""


class ParseTest(unittest.TestCase):
    def test_parse(self):
        txs = parse(JOURNAL)
        self.assertEqual([t.payee for t in txs], ["salary", "groceries", "trip"])
        self.assertEqual(txs[1].postings[2].amount, Decimal("-50.00"))
        self.assertEqual(txs[2].postings[0].commodity, "USD")

    def test_empty(self):
        self.assertEqual(parse(""), [])
        self.assertEqual(parse("; only\n\n"), [])

    def test_posting_before_header(self):
        with self.assertRaises(ParseError) as cm:
            parse("    assets:bank  1\n")
        self.assertEqual(cm.exception.line, 1)

    def test_unbalanced_names_header_line(self):
        with self.assertRaises(ParseError) as cm:
            parse("\n\n2024-01-01 x\n    assets:a  1\n    assets:b  -2\n")
        self.assertEqual(cm.exception.line, 3)

    def test_bad_account_line(self):
        with self.assertRaises(ParseError) as cm:
            parse("2024-01-01 x\n    savings:a  1\n    assets:b\n")
        self.assertEqual(cm.exception.line, 2)

    def test_garbage(self):
        with self.assertRaises(ParseError):
            parse("2024-01-01 x\n    assets:a  one euro\n")

    def test_bad_date(self):
        with self.assertRaises(ValueError):
            parse("2024-13-01 x\n    assets:a  1\n    assets:b\n")


class ParseFileTest(unittest.TestCase):
    def test_many_files(self):
        with tempfile.TemporaryDirectory() as d:
            for i in range(200):
                with open(os.path.join(d, "j%03d.journal" % i), "w") as f:
                    f.write(JOURNAL)
            total = 0
            for name in sorted(os.listdir(d)):
                total += len(parse_file(os.path.join(d, name)))
            self.assertEqual(total, 600)

    def test_missing_file(self):
        with self.assertRaises(OSError):
            parse_file("/nonexistent/ledger.journal")


def _make_case(n):
    def test(self):
        text = "".join("2024-01-%02d t%d\n    expenses:e%d  %d.%02d\n    assets:bank\n"
                       % (1 + i % 28, i, i % 7, i, i % 100) for i in range(n))
        txs = parse(text)
        self.assertEqual(len(txs), n)
        self.assertEqual(sum(t.postings[0].amount for t in txs),
                         sum(Decimal("%d.%02d" % (i, i % 100)) for i in range(n)))
    return test


class ParseSizesTest(unittest.TestCase):
    pass


for _n in (1, 10, 100, 1000, 3000):
    setattr(ParseSizesTest, "test_size_%d" % _n, _make_case(_n))


if __name__ == "__main__":
    unittest.main()
