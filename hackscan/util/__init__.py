"""Generic helpers every layer may import: they know nothing about kernels or rules.

``lazy.cached_property`` (a lock-free ``functools.cached_property``) and ``quick_init.quick_init``
(a one-update ``__init__`` for frozen dataclasses) are the two speed tricks the fact records share;
``tests/test_speed_tricks.py`` holds each to the plain version it replaces.
"""
