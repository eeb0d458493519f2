"""ledger: a small double-entry bookkeeping library, written for
agentbox's bench as a real test suite to run inside sandboxes."""

from ledger.core import Posting, Transaction, Ledger, LedgerError
from ledger.parse import parse, parse_file, ParseError
from ledger.report import balances, register, to_csv, to_json, from_json

__all__ = [
    "Posting", "Transaction", "Ledger", "LedgerError", "parse",
    "parse_file", "ParseError", "balances", "register", "to_csv",
    "to_json", "from_json",
]
