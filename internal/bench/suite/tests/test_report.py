import os
import subprocess
import sys
import tempfile
import unittest
from decimal import Decimal

from ledger import Ledger, parse, balances, register, to_csv, to_json, from_json

from tests.test_parse import JOURNAL

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.led = Ledger(parse(JOURNAL))

    def test_balances(self):
        b = balances(self.led)
        self.assertEqual(b[("assets:bank", "EUR")], Decimal("2450.00"))
        self.assertEqual(b[("income:salary", "EUR")], Decimal("-2500.00"))
        self.assertEqual(b[("expenses:travel", "USD")], Decimal("120"))

    def test_balances_depth(self):
        b = balances(self.led, depth=1)
        self.assertEqual(b[("expenses", "EUR")], Decimal("50.00"))
        self.assertNotIn(("equity", "EUR"), b)

    def test_register(self):
        rows = register(self.led, "assets:bank")
        self.assertEqual([r[3] for r in rows], [Decimal("2500.00"), Decimal("2450.00")])

    def test_register_subtree(self):
        self.assertEqual(len(register(self.led, "expenses")), 3)

    def test_csv(self):
        lines = to_csv(self.led).splitlines()
        self.assertEqual(lines[0], "date,payee,account,amount,commodity")
        self.assertEqual(len(lines), 1 + 7)

    def test_json_roundtrip(self):
        again = from_json(to_json(self.led))
        self.assertEqual(balances(again), balances(self.led))
        self.assertEqual(to_json(again), to_json(self.led))


class CLITest(unittest.TestCase):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, "-m", "ledger", *args], cwd=HERE,
                              capture_output=True, text=True, timeout=120)

    def test_cli_balances(self):
        with tempfile.NamedTemporaryFile("w", suffix=".journal", delete=False) as f:
            f.write(JOURNAL)
        try:
            for _ in range(5):
                out = self.run_cli(f.name)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertIn("assets:bank", out.stdout)
        finally:
            os.unlink(f.name)

    def test_cli_errors(self):
        self.assertEqual(self.run_cli().returncode, 2)
        out = self.run_cli("/nonexistent.journal")
        self.assertEqual(out.returncode, 1)
        self.assertIn("ledger:", out.stderr)


if __name__ == "__main__":
    unittest.main()
