"""Fixtures shared by the reliability tests: a running `evaledger serve`."""

from tests.api.test_serve import server  # noqa: F401
