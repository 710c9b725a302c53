"""The dynamic stage: run each candidate in isolation on hidden inputs (see PROTOCOL.md).

Importing this package costs nothing: torch is imported only by the worker processes, and the
parent side (``stage``) needs numpy alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Config
    from ..inputs import Submission
    from ..model import Report
    from .options import DynamicOptions

__all__ = ["run_dynamic_stage", "prewarm"]


def run_dynamic_stage(sub: Submission, report: Report, options: DynamicOptions, config: Config, **kw: Any) -> Report:
    """Run ``sub`` on hidden inputs in isolated workers; the report gains the dynamic findings.

    The internal entry: ``hackscan.verify`` and ``hackscan.Verifier`` are the public ones."""
    from .stage import run_dynamic_stage as run

    return run(sub, report, options, config, **kw)


def prewarm(device: str = "auto") -> None:
    """Start the worker server (its ``import torch`` takes about 2 s) in the background now, so the
    first ``run_dynamic_stage`` does not wait for it.  A training loop calls this at start-up."""
    import threading

    from .pool import default_pool

    def start() -> None:
        try:
            default_pool().zygote(device)
        except Exception:  # the first real call reports why, with the candidate it concerns
            pass

    threading.Thread(target=start, name="hackscan-prewarm", daemon=True).start()
