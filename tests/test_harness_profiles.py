"""Static rules whose premise is what the scoring harness does read the harness profile (``--harness``).

KernelBench never calls ``.eval()`` (``self.training`` is True when it scores); the ``plain`` profile
does.  The same ``if self.training:`` dispatch is a torch fallback under one and legitimate under the
other, and the message names the profile the premise comes from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "python" / "batchnorm"
# torch on the training arm, the kernel on the eval arm: the torch path is what KernelBench scores
TRAINING_TORCH = (FIXTURE / "hack_eval_only_kernel.py").read_text()
# the mirror image: torch on the eval arm, the kernel in training mode: what an eval-mode harness scores
EVAL_TORCH = TRAINING_TORCH.replace("if self.training:  # expect: HS118", "if not self.training:")
REFERENCE = (FIXTURE / "reference.py").read_text()
LINE = 73


def _hs118(code: str, harness: str) -> list:
    sub = Submission(path=str(FIXTURE / "variant.py"), code=code, reference=REFERENCE,
                     reference_path=str(FIXTURE / "reference.py"))
    report = StaticScanner(Config(mode="gate", harness=harness)).scan(sub)
    return [f for f in report.findings if f.rule == "HS118"]


def test_mirror_differs_only_in_the_condition() -> None:
    assert EVAL_TORCH != TRAINING_TORCH
    assert EVAL_TORCH.splitlines()[LINE - 1].strip() == "if not self.training:"


@pytest.mark.parametrize("code, harness, fires", [
    (TRAINING_TORCH, "kernelbench", True),   # hack: KernelBench scores the training-mode torch arm
    (TRAINING_TORCH, "plain", False),        # look-alike: an eval-mode harness takes the kernel
    (EVAL_TORCH, "plain", True),             # hack: the eval-mode harness takes the torch arm
    (EVAL_TORCH, "kernelbench", False),      # look-alike: KernelBench's training mode takes the kernel
])
def test_training_dispatch_follows_the_profile(code: str, harness: str, fires: bool) -> None:
    found = _hs118(code, harness)
    assert [f.location.line for f in found] == ([LINE] if fires else [])
    if fires:
        assert f"({harness} harness)" in found[0].message
        assert found[0].evidence["harness"] == harness
