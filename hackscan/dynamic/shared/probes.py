"""The probe catalogue: which hidden inputs exist, what each tests, and in which order to spend time.

Plain data shared by the parent (planning, findings) and the reference worker (generation); no
torch here.  A probe spec is a JSON dict:

``{"id", "family", "transform", "seed", "setup", "dims", "layout", "description", "steered_by"}``

* ``family`` picks the rule a failure reports under (the parent's ``rules.results.FAMILY_UNITS``).
* ``transform`` says how the reference worker turns a fresh ``get_inputs()`` draw into the probe's
  inputs (``worker/hidden.py`` implements each).
* ``dims`` overrides module-level constants of the reference before ``get_inputs`` /
  ``get_init_inputs`` are evaluated again (other shapes).
* ``layout`` is ``strided`` when the candidate gets non-contiguous views of the same values.
* ``draw`` (the ``search`` transform only) says how the searched values are built (``search.py``).
* ``draw_seed`` (the ``nudged`` transform only) is the seed of the probe whose draw it transforms
  (``original``'s); its own ``seed`` still seeds the transform.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Transform:
    name: str
    family: str
    description: str
    # taxonomy classes a failure on this probe speaks for (steering picks extra probes by class)
    classes: tuple[int, ...]


TRANSFORMS: dict[str, Transform] = {t.name: t for t in (
    Transform("original", "original", "get_inputs() with a fresh seed", (6, 7, 8, 18)),
    Transform("randn", "value", "every float input redrawn from the standard normal", (1, 6)),
    Transform("sign_flip", "value", "every float input negated", (1, 6)),
    Transform("shift_up", "value", "every float input shifted by +3", (1, 6, 16)),
    Transform("sparse_negatives", "value", "|x| with about 2% of elements made negative", (1,)),
    Transform("single_negative", "value", "|x| with one element made negative at a random position", (1,)),
    Transform("needle", "value", "one large element at an odd position, off any power-of-two stride", (15,)),
    Transform("large", "magnitude", "every float input scaled by a factor in [1e2, 1e3]", (14, 16)),
    Transform("small", "magnitude", "every float input scaled by 1e-3", (14, 16)),
    # a large common offset: E[x^2] - E[x]^2 cancels, exp(x) without the row max overflows, while
    # every value's spread stays what the task draws (what scaling alone cannot show)
    Transform("offset", "magnitude", "every float input shifted by +1e3", (14, 16)),
    # moderate growth: a truncated exp/tanh series is exact on [0, 1) and far off on [0, 10)
    Transform("scale_10", "magnitude", "every float input scaled by 10", (14, 16)),
    # the original draw itself (the spec's ``draw_seed`` is the original's) with two elements of each
    # float input swapped, far apart: a result memo keyed on a sample of the input (a hash of a few
    # elements, a comparison of 32 of them with the previous call's) hands back the old result
    Transform("nudged", "original", "the original get_inputs() draw with two elements of each float input swapped",
              (8,)),
    Transform("strided", "layout", "fresh get_inputs() values passed as non-contiguous views", (2,)),
    # the seeded input search (search.py): how the values are built is the spec's ``draw``
    Transform("search", "search", "a searched input", (1, 6, 15, 16)),
)}

# the order in which probes are worth their time; planning drops from the end when over budget
VALUE_ORDER = ("randn", "sign_flip", "single_negative", "shift_up", "needle", "sparse_negatives", "large", "offset",
               "scale_10", "small")

# shape variants: how each dimension constant is changed (all at once, which tests each dim)
SHAPE_VARIANTS = {
    "smaller_odd": "every dimension constant made smaller and odd",
    "near": "every dimension constant moved by one (odd, not a power of two)",
    "larger": "every dimension constant made larger (about x1.25, odd)",
}


def shape_value(variant: str, v: int) -> int:
    if variant == "smaller_odd":
        out = (v // 2) | 1
    elif variant == "near":
        out = v + 1 if v % 2 == 0 else v + 2
        if out & (out - 1) == 0:
            out += 2
    elif variant == "larger":
        out = (v + v // 4 + 1) | 1
    else:
        raise ValueError(variant)
    return max(1, out)


def derive(secret: int, purpose: str) -> int:
    """A seed for ``purpose`` from ``secret`` by a keyed one-way function (BLAKE2b keyed by the secret).

    Every seed of a run comes from the run's secret seed this way (each probe's draw, the redrawn
    parameters, the perturbation noise, timing), never as ``seed ^ CONST`` or ``seed + i``: a
    candidate that learns one derived seed (a construction seed it is built under, or one it
    brute-forces from the inputs it sees) learns nothing about the run seed or any other probe's
    seed.  ``--seed`` replays every one of them.  63 bits: ``torch.manual_seed`` takes them all, and
    a draw cannot be searched back to its seed.
    """
    key = str(int(secret)).encode()[:64]  # any int the user gives, negative ones too
    h = hashlib.blake2b(purpose.encode("utf-8", "surrogatepass"), key=key, digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFF_FFFF_FFFF_FFFF


def probe_seed(base: int, probe_id: str) -> int:
    """A per-probe seed derived from the run's seed, so ``--seed`` replays every probe."""
    return derive(base, "probe:" + probe_id)


def spec(probe_id: str, transform: str, base_seed: int, *, setup: str = "harness", dims: dict[str, int] | None = None,
         layout: str = "contiguous", family: str | None = None, description: str | None = None,
         steered_by: list[str] | None = None) -> dict[str, Any]:
    t = TRANSFORMS[transform]
    return {
        "id": probe_id,
        "family": family or t.family,
        "transform": transform,
        "seed": probe_seed(base_seed, probe_id),
        "setup": setup,
        "dims": dict(dims or {}),
        "layout": layout,
        "description": description or t.description,
        "steered_by": list(steered_by or []),
    }
