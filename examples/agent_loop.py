#!/usr/bin/env python3
"""A minimal agent loop on agentbox.

A scripted "model" proposes code for a small task; the loop runs the code
and the task's tests in a sandbox, feeds the failure back to the model, and
retries until the tests pass. A real agent would call an LLM in
``ScriptedModel.propose``; everything else stays the same.

    python3 examples/agent_loop.py [--template base] [--max-attempts 5]

Exits 0 once a proposal passes the tests, 1 if none does.
Needs the agentbox SDK (pip install ./sdk/python, or PYTHONPATH=sdk/python)
and a daemon (AGENTBOX_HOST / AGENTBOX_API_KEY, or root on its host).
"""

import argparse
import sys
import textwrap
import time

from agentbox import Sandbox
from agentbox.errors import AgentboxError

TASK = textwrap.dedent('''\
    Write solution.py with a function roman(n: int) -> str that returns the
    Roman numeral of 1 <= n <= 3999, and raises ValueError outside that range.
''')

# The task's tests: they run in the sandbox, never on this machine.
TESTS = textwrap.dedent('''\
    import unittest
    from solution import roman

    class RomanTest(unittest.TestCase):
        def test_simple(self):
            self.assertEqual(roman(1), "I")
            self.assertEqual(roman(8), "VIII")
            self.assertEqual(roman(2024), "MMXXIV")

        def test_subtractive(self):
            self.assertEqual(roman(4), "IV")
            self.assertEqual(roman(94), "XCIV")
            self.assertEqual(roman(1994), "MCMXCIV")

        def test_range(self):
            self.assertEqual(roman(3999), "MMMCMXCIX")
            for bad in (0, -1, 4000):
                with self.assertRaises(ValueError):
                    roman(bad)

    if __name__ == "__main__":
        unittest.main()
''')

# What the scripted model says, in order: a syntax error, a version that
# forgets subtractive pairs, one that forgets the range check, then a
# correct one.
CANDIDATES = [
    textwrap.dedent('''\
        def roman(n)
            return "I" * n
    '''),
    textwrap.dedent('''\
        def roman(n):
            out = ""
            for value, letters in [(1000, "M"), (500, "D"), (100, "C"), (50, "L"),
                                   (10, "X"), (5, "V"), (1, "I")]:
                while n >= value:
                    out += letters
                    n -= value
            return out
    '''),
    textwrap.dedent('''\
        PAIRS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                 (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]

        def roman(n):
            out = ""
            for value, letters in PAIRS:
                while n >= value:
                    out += letters
                    n -= value
            return out
    '''),
    textwrap.dedent('''\
        PAIRS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                 (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]

        def roman(n):
            if not 1 <= n <= 3999:
                raise ValueError(f"roman numerals cover 1..3999, not {n}")
            out = ""
            for value, letters in PAIRS:
                while n >= value:
                    out += letters
                    n -= value
            return out
    '''),
]


class ScriptedModel:
    """Stands in for an LLM: answers with the next canned candidate. It
    receives the task and the last failure, as a real model would."""

    def __init__(self, candidates):
        self._candidates = list(candidates)
        self.prompts = []

    def propose(self, task, feedback):
        self.prompts.append((task, feedback))
        if not self._candidates:
            return None
        return self._candidates.pop(0)


def last_lines(text, n=6):
    lines = [l for l in text.strip().splitlines() if l.strip() and set(l.strip()) != {"-"}]
    return "\n".join(lines[-n:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", default="base", help="template to run the code in (default: base)")
    ap.add_argument("--max-attempts", type=int, default=len(CANDIDATES))
    args = ap.parse_args()

    model = ScriptedModel(CANDIDATES)
    feedback = None
    t0 = time.monotonic()
    try:
        with Sandbox.create(template=args.template, ttl_seconds=300,
                            metadata={"example": "agent_loop"}) as sbx:
            print(f"sandbox {sbx.id} (template {args.template}) ready in {time.monotonic() - t0:.2f}s")
            sbx.files.mkdir("/work")
            sbx.files.write("/work/test_solution.py", TESTS)
            for attempt in range(1, args.max_attempts + 1):
                code = model.propose(TASK, feedback)
                if code is None:
                    break
                sbx.files.write("/work/solution.py", code)
                t = time.monotonic()
                r = sbx.exec(["python3", "-m", "unittest", "-q", "test_solution"], cwd="/work", timeout=60)
                took = time.monotonic() - t
                if r.exit_code == 0:
                    print(f"attempt {attempt}: tests pass ({took:.2f}s)")
                    print(f"solved after {attempt} attempts in {time.monotonic() - t0:.2f}s")
                    return 0
                feedback = last_lines(r.stderr or r.stdout)
                print(f"attempt {attempt}: tests fail (exit {r.exit_code}, {took:.2f}s); feedback to the model:")
                print(textwrap.indent(feedback, "    "))
    except AgentboxError as e:
        print(f"agent_loop: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print("no proposal passed the tests", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
