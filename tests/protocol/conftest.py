"""Every codec test runs twice: on the pure-Python codec and on the compiled one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiorocket._protocol import accel


# Module scope: Hypothesis refuses function-scoped fixtures on @given tests.
@pytest.fixture(autouse=True, scope="module", params=["python", "compiled"])
def codec_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Switch the codec for the tests of one module; the compiled run is skipped when the
    extension is not built."""
    compiled = request.param == "compiled"
    if compiled and not accel.AVAILABLE:
        pytest.skip(accel.describe())
    accel.use(compiled)
    try:
        yield request.param
    finally:
        accel.use(accel.ACTIVE)
