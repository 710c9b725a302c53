"""The seeded input search (HS415) without workers: the draws replay from the seed and cover every
feature, shrinking only simplifies, and each searched input is rebuilt from its draw alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hackscan.dynamic.search import DRAWS, FEATURES, MAX_CALLS, _halved, _shrink_steps, describe, draws_for  # noqa: E402
from hackscan.dynamic.worker.hidden import SPECIAL_VALUES, apply_transform  # noqa: E402


def test_draws_replay_from_the_seed_and_cover_every_feature() -> None:
    for seed in (1, 7, 20261202):
        draws = draws_for(seed)
        assert draws == draws_for(seed)
        assert len(draws) == DRAWS < MAX_CALLS
        assert all(any(f in d for d in draws) for f in FEATURES)
        assert any(d["sign"] == "signed" for d in draws)
    assert draws_for(1) != draws_for(2)
    assert all(d["shape"] == "task" for d in draws_for(3, shapes=False))


def test_shrinking_halves_the_shape_once_then_drops_features() -> None:
    task = {"batch_size": {"value": 16}, "dim": {"value": 16384}}
    assert _halved(task, {}) == {"batch_size": 8, "dim": 8192}
    assert _halved({"n": {"value": 1}}, {}) is None
    draw = {"sign": "signed", "sparse": 0.9, "scale": 2.0}
    steps = _shrink_steps(task, draw, {}, set(), 0)
    names = [s[0] for s in steps]
    assert names[0] == "halve the shape"
    assert {"drop sparse", "drop scale", "task signs", "fill"} <= set(names)
    for name, d, _dims in steps:
        if name.startswith("drop "):
            assert name[5:] not in d and len(d) == len(draw) - 1
    # a tried step is not offered again; no shape to halve at the cap
    assert "halve the shape" not in [s[0] for s in _shrink_steps(task, draw, {}, {"halve"}, 0)]
    assert "halve the shape" not in [s[0] for s in _shrink_steps(task, draw, {}, set(), 3)]
    # after one halving, the features go before the shape is halved again
    later = [s[0] for s in _shrink_steps(task, draw, {"batch_size": 8, "dim": 8192}, set(), 1)]
    assert later.index("drop sparse") < later.index("halve the shape") < later.index("fill")
    assert "90% exact zeros" in describe(draw, {"dim": 5})


def test_a_searched_input_is_its_draw_and_dropping_a_feature_keeps_the_others() -> None:
    x = torch.rand(6, 50)
    sparse = apply_transform([x], "search", 11, {"sign": "signed", "sparse": 0.5})[0]
    both = apply_transform([x], "search", 11, {"sign": "signed", "sparse": 0.5, "special": 0.3})[0]
    assert torch.equal(sparse, apply_transform([x], "search", 11, {"sign": "signed", "sparse": 0.5})[0])
    assert (sparse == 0).any() and (sparse < 0).any()
    # the special values land where the sparse ones left other values, the rest is unchanged
    differs = both != sparse
    assert differs.any()
    assert all(float(v) in SPECIAL_VALUES for v in both[differs])
    rows = apply_transform([x], "search", 11, {"sign": "task", "repeat_rows": True, "integers": True})[0]
    assert torch.equal(rows[3], rows[0]) and torch.equal(rows, rows.round() / 1)
    assert (apply_transform([x], "search", 11, {"sign": "negative"})[0] <= 0).all()
