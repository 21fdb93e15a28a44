"""Fixtures shared by the integrity tests: the signed `story` ledger and the two-role store."""

from tests.api.test_operation import two_roles  # noqa: F401
from tests.domain.test_integrity import story  # noqa: F401
