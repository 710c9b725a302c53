"""Checks of Python host code, one module per hack class (fallback, state, timing, ...)."""
