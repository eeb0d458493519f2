import re

from ledger.core import Posting, Transaction, LedgerError


class ParseError(LedgerError):
    def __init__(self, line, msg):
        super().__init__("line %d: %s" % (line, msg))
        self.line = line


_HEAD = re.compile(r"^(\d{4}-\d{2}-\d{2})\s+(.*\S)\s*$")
_POST = re.compile(r"^\s+([a-z][\w:-]*)(?:\s{2,}(-?\d+(?:\.\d+)?)(?:\s+([A-Z]{3}))?)?\s*$")


def parse(text):
    """Parses a journal: a dated header line, then indented postings."""
    out, head, posts, start = [], None, [], 0

    def flush():
        if head is None:
            return
        try:
            out.append(Transaction(head[0], head[1], posts))
        except LedgerError as e:
            raise ParseError(start, str(e))

    for n, line in enumerate(text.splitlines(), 1):
        line = line.split(";", 1)[0].rstrip()
        if not line.strip():
            continue
        m = _HEAD.match(line)
        if m:
            flush()
            head, posts, start = (m.group(1), m.group(2)), [], n
            continue
        m = _POST.match(line)
        if not m or head is None:
            raise ParseError(n, "cannot read %r" % line.strip())
        try:
            posts.append(Posting(m.group(1), m.group(2), m.group(3) or "EUR"))
        except LedgerError as e:
            raise ParseError(n, str(e))
    flush()
    return out


def parse_file(path):
    with open(path, encoding="utf-8") as f:
        return parse(f.read())
