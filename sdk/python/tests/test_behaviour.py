"""The shared behaviour suite, run with both the blocking and the asyncio
SDK. The Go SDK runs the same cases in integration/sdk_behaviour_test.go."""

import asyncio

import pytest

from _behaviour import AsyncSandbox, Sandbox, load_cases, run_case
from conftest import BEHAVIOUR_DIR

CASES = load_cases(BEHAVIOUR_DIR)


def test_suite_is_not_empty():
    assert len(CASES) >= 10, f"found only {len(CASES)} cases in {BEHAVIOUR_DIR}"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_sync(case):
    asyncio.run(run_case(Sandbox, case))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_async(case):
    asyncio.run(run_case(AsyncSandbox, case))
