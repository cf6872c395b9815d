"""Fixtures of the gate tests."""

from tests.gate.helpers import env  # noqa: F401
