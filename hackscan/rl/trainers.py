"""Reward functions with the calling conventions of the RL trainers people use.

- ``trl_reward(...)``: a function for TRL's ``GRPOTrainer(reward_funcs=[...])``.  TRL calls it as
  ``f(prompts=..., completions=..., completion_ids=..., **columns)``, where ``columns`` holds every
  other column of the dataset, one value per completion (the reference code is one of them:
  ``reference_field``, default ``"reference"``), plus ``trainer_state``, ``log_extra`` and
  ``log_metric``; it returns one float per completion.
- ``verl_compute_score(...)``: a function for verl's ``custom_reward_function`` (its reward
  managers call ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` per
  sample, the batch manager ``compute_score(data_sources=, solution_strs=, ground_truths=,
  extra_infos=)`` once per batch); the ground truth is the reference code.  Returns a dict with
  ``score`` (verl logs the other keys) or, for a batch, a list of them.

Both extract the code from a completion (the last fenced block that defines ``ModelNew``, else the
last fenced block, else the whole text), verify the batch with one ``Verifier`` (built on first
use, or the one given), and score it with a ``RewardPolicy``.  Neither imports TRL, verl or torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .reward import DEFAULT_POLICY, RewardPolicy
from .verification import Verification

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: Any) -> str:
    """The code of one completion: a string, or a conversation (a list of ``{"role", "content"}``
    messages, TRL's conversational format: the last assistant message).  Anything else is "",
    which verifies as an empty generation (the floor)."""
    if isinstance(completion, list):
        texts = [m.get("content") for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        completion = texts[-1] if texts else None
    if not isinstance(completion, str):
        return ""
    blocks = [body for _, body in _FENCE.findall(completion)]
    if not blocks:
        return completion
    with_model = [b for b in blocks if re.search(r"^class\s+ModelNew\b", b, re.M)]
    return (with_model or blocks)[-1]


class _Lazy:
    """One ``Verifier`` for an adapter, built on its first call (a trainer may build the reward
    function on a process that never scores)."""

    def __init__(self, verifier: Any, kw: dict[str, Any]):
        self._verifier = verifier
        self._kw = kw

    def get(self) -> Any:
        if self._verifier is None:
            from .verifier import Verifier

            self._verifier = Verifier(**self._kw)
        return self._verifier


def _summary(v: Verification) -> str:
    if v.accepted:
        return v.verdict
    return f"{v.verdict}: {', '.join(v.rejected_for)}" if v.rejected_for else v.verdict


def trl_reward(verifier: Any = None, *, reference_field: str = "reference", policy: RewardPolicy = DEFAULT_POLICY,
               name: str = "hackscan", **verifier_kw: Any) -> Callable[..., list[float]]:
    """A reward function for ``trl.GRPOTrainer(reward_funcs=[...])``: ``verifier`` (a ``Verifier``;
    None: one built from ``verifier_kw`` on first use), the dataset column that holds each prompt's
    reference code, the ``RewardPolicy``, and the name TRL logs the reward under."""
    lazy = _Lazy(verifier, verifier_kw)

    def reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        refs = kwargs.get(reference_field)
        if refs is None:
            raise ValueError(f"hackscan reward: the dataset has no {reference_field!r} column (the reference code "
                             "of each prompt); name it with trl_reward(reference_field=...)")
        if len(refs) != len(completions):
            raise ValueError(f"hackscan reward: {len(completions)} completions but {len(refs)} references")
        results = lazy.get().map([(extract_code(c), r) for c, r in zip(completions, refs, strict=True)])
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("hackscan_verdict", [_summary(v) for v in results])
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and results:
            log_metric("hackscan/accepted", sum(v.accepted for v in results) / len(results))
        return [policy(v) for v in results]

    reward.__name__ = reward.__qualname__ = name
    return reward


def _verl_row(v: Verification, policy: RewardPolicy) -> dict[str, Any]:
    sp = v.speedup(policy.baseline)
    # every value a plain number: verl gathers each key into an array per batch
    return {"score": policy(v), "accepted": float(v.accepted), "correct": float(bool(v.correct)),
            "speedup": float(sp.value) if sp is not None and v.accepted else 0.0}


def verl_compute_score(verifier: Any = None, *, policy: RewardPolicy = DEFAULT_POLICY,
                       **verifier_kw: Any) -> Callable[..., Any]:
    """A ``compute_score`` for verl's ``custom_reward_function`` (per-sample and batch forms, see the
    module's docstring): ``ground_truth`` is the reference code (or an ``extra_info["reference"]``
    when the ground truth is something else)."""
    lazy = _Lazy(verifier, verifier_kw)

    def reference_of(ground_truth: Any, extra: Any) -> Any:
        if isinstance(extra, dict) and isinstance(extra.get("reference"), str):
            return extra["reference"]
        return ground_truth

    def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                      extra_info: Any = None, *, data_sources: Sequence[Any] | None = None,
                      solution_strs: Sequence[Any] | None = None, ground_truths: Sequence[Any] | None = None,
                      extra_infos: Sequence[Any] | None = None, **_: Any) -> Any:
        if solution_strs is not None:  # the batch reward manager
            gts = list(ground_truths) if ground_truths is not None else [None] * len(solution_strs)
            extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
            batch = [(extract_code(s), reference_of(g, e)) for s, g, e in zip(solution_strs, gts, extras, strict=True)]
            return [_verl_row(v, policy) for v in lazy.get().map(batch)]
        v = lazy.get().verify(extract_code(solution_str), reference_of(ground_truth, extra_info))
        return _verl_row(v, policy)

    return compute_score
