"""Fixtures shared by the reliability tests: a running `evaledger serve`, the two-role store."""

from tests.api.test_operation import two_roles  # noqa: F401
from tests.api.test_serve import server  # noqa: F401
