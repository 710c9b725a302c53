"""Worker side of the dynamic stage: the code that runs inside a sandbox next to the candidate.

These modules may import torch; the parent never imports them (tests/test_sides.py).  What of them
a sandbox holds is the closure of ``boot.py``'s imports (``staging.worker_modules()``), staged under
a neutral package name.  ``zygote.py`` is the one exception: the ``--sandbox off`` forkserver, a
process of its own that forks workers which run the same ``serve``.
"""
