"""Shared fixtures. The tests talk to a real daemon: AGENTBOX_HOST and
AGENTBOX_API_KEY name it (integration/python_sdk_test.go sets both for the
integration harness's daemon); as root with neither set, the local one."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package, uninstalled

from agentbox import Sandbox  # noqa: E402

BEHAVIOUR_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "testdata", "behaviour")
TEMPLATE = os.environ.get("AGENTBOX_TEST_TEMPLATE", "base")


@pytest.fixture
def sbx():
    """A fresh sandbox, destroyed after the test."""
    with Sandbox.create(template=TEMPLATE, ttl_seconds=300, metadata={"suite": "sdk-python"}) as s:
        yield s


@pytest.fixture(scope="module")
def shared_sbx():
    """One sandbox for a module's read-mostly tests."""
    with Sandbox.create(template=TEMPLATE, ttl_seconds=600, metadata={"suite": "sdk-python"}) as s:
        yield s
