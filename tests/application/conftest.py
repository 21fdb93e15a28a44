"""Fixtures of the use-case tests: the two-role PostgreSQL store."""

from tests.api.test_operation import two_roles  # noqa: F401
