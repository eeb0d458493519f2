import sys

from ledger import Ledger, parse_file, balances, ParseError


def main(argv):
    if len(argv) != 2:
        print("usage: python3 -m ledger JOURNAL", file=sys.stderr)
        return 2
    try:
        led = Ledger(parse_file(argv[1]))
    except (OSError, ParseError) as e:
        print("ledger: %s" % e, file=sys.stderr)
        return 1
    for (account, commodity), amount in balances(led).items():
        print("%-30s %12s %s" % (account, amount, commodity))
    return 0


sys.exit(main(sys.argv))
