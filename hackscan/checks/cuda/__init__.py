"""Checks of CUDA / C++ extension code, one module per hack class."""
