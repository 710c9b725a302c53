"""The TRL and verl adapters, called the way the installed libraries call a reward function: TRL's
``GRPOTrainer._calculate_rewards``, verl's reward managers (the per-sample and batch ones of
``verl.workers.reward_manager``, and the reward loop's ``NaiveRewardManager.run_single`` with the
function loaded from a user's file by ``get_custom_reward_fn``).  Skipped where trl or verl is not
installed (``pip install -e '.[rl]'``; see docs/reward.md for verl without its GPU stack).

The verifier is the real one for generations that never reach a worker (empty, "None", no
``ModelNew``: the floor); a candidate that would need a sandboxed run is answered by a stand-in,
so these tests cost no dynamic stage (tests/test_dynamic_verifier.py runs real ones)."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest

import hackscan
from hackscan.rl.reward import RewardPolicy
from hackscan.rl.trainers import extract_code, trl_reward, verl_compute_score
from hackscan.rl.verification import Speedup, Verification

from .conftest import FIXTURES

REF = (FIXTURES / "dynamic" / "relu" / "reference.py").read_text()
GOOD = "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n```"
COMPLETIONS = [GOOD, "", "None", "Sure! Here is no code at all.", "```python\ndef forward(:\n```"]
EXPECTED = [0.3 + math.log2(1 + 1.8), 0.0, 0.0, 0.0, 0.0]


class _Verifier:
    """The real verifier, except that a candidate defining ModelNew is answered as accepted at 2x
    (interval 1.8x-2.2x) instead of being run."""

    def __init__(self):
        self.real = hackscan.Verifier(device="cpu", prewarm=False)
        self.calls: list[tuple[str, str]] = []

    def verify(self, code, ref):
        self.calls.append((code, ref))
        if isinstance(code, str) and "class ModelNew" in code and "def forward(self" in code:
            return Verification("clean", True, (), (), True, {"eager_fp32": Speedup(2.0, 1.8, 2.2, 0.95)}, True, 5)
        return self.real.verify(code, ref)

    def map(self, batch):
        return [self.verify(c, r) for c, r in batch]


def test_code_is_taken_from_the_fence_that_defines_the_model() -> None:
    text = "plan:\n```python\nx = 1\n```\nthen\n```py\nclass ModelNew(nn.Module):\n    pass\n```\n```\nlog\n```"
    assert extract_code(text).startswith("class ModelNew")
    assert extract_code([{"role": "user", "content": "q"}, {"role": "assistant", "content": GOOD}]).startswith("import")
    assert extract_code("class ModelNew: pass") == "class ModelNew: pass"
    assert extract_code(None) == "" and extract_code([{"role": "user", "content": "q"}]) == ""


def test_trl_grpo_trainer_calls_the_reward_as_it_calls_its_own() -> None:
    pytest.importorskip("trl")
    accelerate = pytest.importorskip("accelerate")
    from collections import defaultdict

    from trl import GRPOTrainer

    verifier = _Verifier()
    reward = trl_reward(verifier)
    trainer = SimpleNamespace(
        accelerator=accelerate.Accelerator(cpu=True), reward_funcs=[reward], reward_processing_classes=[None],
        reward_func_names=[reward.__name__], state=SimpleNamespace(global_step=3), args=SimpleNamespace(report_to=[]),
        environments=None, _pending_extra_logs=defaultdict(list), _pending_metrics=defaultdict(list))
    trainer._log_completion_extra = lambda column, values: trainer._pending_extra_logs[column].extend(values)
    trainer._log_metric = lambda name, value: trainer._pending_metrics[name].append(value)
    inputs = [{"prompt": "write relu", "reference": REF, "task": "relu"} for _ in COMPLETIONS]
    rewards = GRPOTrainer._calculate_rewards(trainer, inputs, ["write relu"] * len(COMPLETIONS), COMPLETIONS,
                                             [[1]] * len(COMPLETIONS))
    assert rewards.shape == (len(COMPLETIONS), 1)
    assert rewards[:, 0].tolist() == pytest.approx(EXPECTED)
    assert [r for _, r in verifier.calls] == [REF] * len(COMPLETIONS)
    assert trainer._pending_extra_logs["hackscan_verdict"][0] == "clean"
    assert trainer._pending_metrics["hackscan/accepted"] == [pytest.approx(0.2)]


def test_trl_reward_without_the_reference_column_says_which_column() -> None:
    with pytest.raises(ValueError, match="'ref_code'"):
        trl_reward(_Verifier(), reference_field="ref_code")(prompts=["p"], completions=[GOOD], reference=[REF])


class _Tokenizer:
    """Each response is one token whose id indexes the completion texts."""

    def decode(self, ids, skip_special_tokens=True):
        return COMPLETIONS[int(ids[-1])] if len(ids) else ""


def _data_proto(n: int):
    import numpy as np
    import torch
    from verl import DataProto

    prompts = torch.zeros((n, 2), dtype=torch.long)
    responses = torch.arange(n, dtype=torch.long).unsqueeze(1)
    mask = torch.ones((n, 3), dtype=torch.long)
    non = {"data_source": np.array(["kernelbench"] * n, dtype=object),
           "reward_model": np.array([{"ground_truth": REF} for _ in range(n)], dtype=object),
           "extra_info": np.array([{"index": i} for i in range(n)], dtype=object)}
    return DataProto.from_dict(tensors={"prompts": prompts, "responses": responses, "attention_mask": mask},
                               non_tensors=non)


def test_verl_reward_managers_call_compute_score_per_sample_and_per_batch() -> None:
    pytest.importorskip("verl")
    pytest.importorskip("tensordict")
    from verl.workers.reward_manager.batch import BatchRewardManager
    from verl.workers.reward_manager.naive import NaiveRewardManager

    n = len(COMPLETIONS)
    score = verl_compute_score(_Verifier())
    for manager in (NaiveRewardManager(_Tokenizer(), 0, compute_score=score),
                    BatchRewardManager(_Tokenizer(), 0, compute_score=score)):
        out = manager(_data_proto(n), return_dict=True)
        assert out["reward_tensor"][:, -1].tolist() == pytest.approx(EXPECTED)
        assert out["reward_extra_info"]["accepted"] == [1.0, 0.0, 0.0, 0.0, 0.0]
        assert out["reward_extra_info"]["speedup"][0] == pytest.approx(2.0)


def test_verl_loads_compute_score_from_a_users_file_and_the_reward_loop_calls_it(tmp_path, monkeypatch) -> None:
    pytest.importorskip("verl")
    omegaconf = pytest.importorskip("omegaconf")
    try:
        from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
        from verl.trainer.ppo.reward import get_custom_reward_fn
    except ImportError as exc:  # verl installed without the reward loop's own dependencies
        pytest.skip(f"verl's reward loop does not import here: {exc}")

    user = tmp_path / "kernel_reward.py"
    user.write_text("from hackscan.rl.trainers import verl_compute_score\n"
                    "from tests.test_trainers import _Verifier\n"
                    "compute_score = verl_compute_score(_Verifier())\n")
    config = omegaconf.OmegaConf.create({"reward": {"custom_reward_function": {"path": str(user),
                                                                                "name": "compute_score"}}})
    fn = get_custom_reward_fn(config)
    manager = NaiveRewardManager(config, _Tokenizer(), fn)
    data = _data_proto(len(COMPLETIONS))

    async def every():
        return await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(COMPLETIONS))))

    results = manager.loop.run_until_complete(every())
    assert [r["reward_score"] for r in results] == pytest.approx(EXPECTED)


def test_a_custom_policy_reaches_the_adapters() -> None:
    floor = RewardPolicy(floor=-1.0, correct=0.0, uncertainty="value")
    rewards = trl_reward(_Verifier(), policy=floor)(prompts=["p"] * 2, completions=[GOOD, ""], reference=[REF] * 2)
    assert rewards == pytest.approx([-1.0 + math.log2(3.0), -1.0])
    row = verl_compute_score(_Verifier(), policy=floor)(data_source="x", solution_str="", ground_truth=REF)
    assert row["score"] == -1.0 and row["accepted"] == 0.0
