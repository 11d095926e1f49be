"""Shared fixtures. The broker fixture lives in tests/integration/conftest.py."""
