"""set_egress's limits body (docs/network.md); needs no daemon."""

import pytest

from agentbox._common import limits_body


@pytest.mark.parametrize("conns,mbit,want", [
    (0, 0, {}),
    (4, 0, {"max_connections": 4}),
    (0, 8, {"bandwidth_mbit": 8}),
    (-1, -1, {"max_connections": -1, "bandwidth_mbit": -1}),
])
def test_limits_body(conns, mbit, want):
    assert limits_body(conns, mbit) == want


@pytest.mark.parametrize("conns,mbit", [(-2, 0), (0, -5), (True, 0), ("4", 0)])
def test_limits_body_refused(conns, mbit):
    with pytest.raises(ValueError):
        limits_body(conns, mbit)
