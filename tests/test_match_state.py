"""How the reference's parameters reach the candidate for the redrawn-parameters probe (HS407).

A candidate that keeps the reference's ``nn.LayerNorm`` affine as its own ``weight`` / ``bias`` must
get the redrawn values (else an honest kernel reads as a parameter blind spot); one that reads
other tensors than the ones it was handed must still be wrong under the redraw."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from hackscan.dynamic.worker.candidate import match_state  # noqa: E402


class _Own(nn.Module):
    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))


def _ref_state(n: int = 8) -> dict:
    ln = nn.LayerNorm(n)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-1, 1)
    return {f"ln.{k}": v.detach().clone() for k, v in ln.state_dict().items()}


def test_renamed_affine_is_loaded_by_its_last_name() -> None:
    model, ref = _Own(), _ref_state()
    got = match_state(model, ref, "cpu")
    assert got["method"] == "loaded", got
    assert got["renamed"] == {"ln.weight": "weight", "ln.bias": "bias"}
    assert torch.equal(model.weight.detach(), ref["ln.weight"]) and torch.equal(model.bias.detach(), ref["ln.bias"])


def test_names_that_do_not_match_stay_unmatched() -> None:
    class Other(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gamma = nn.Parameter(torch.ones(8))
            self.beta = nn.Parameter(torch.zeros(8))

    got = match_state(Other(), _ref_state(), "cpu")
    assert got["method"] == "partial" and sorted(got["unmatched_reference"]) == ["ln.bias", "ln.weight"]
