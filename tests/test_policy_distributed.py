"""PPO and GRPO under `torchrun --nproc_per_node 2` on the CPU (gloo): both processes end with identical weights.

Run by pytest, this file launches itself under torchrun; each process trains the tiny policy of
tests/policy_helpers.py on its own prompts for two iterations with each algorithm and saves its weights and prompt
indices (GRPO: the rows it sampled) for the test to compare.
"""

import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.policy_helpers import GROUP_SIZE

ROOT = Path(__file__).resolve().parent.parent


def test_two_processes_end_with_identical_weights(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
               str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for algorithm in ("ppo", "grpo"):
        first, second = (torch.load(tmp_path / f"{algorithm}-rank{r}.pt", weights_only=True) for r in (0, 1))
        assert first["world_size"] == second["world_size"] == 2
        assert set(first["prompts"]).isdisjoint(second["prompts"])  # in an iteration each process has its own prompts
        for name, value in first["weights"].items():  # ...yet the gradients were averaged: same weights
            assert torch.equal(value, second["weights"][name]), name
        initial = first["initial"]
        assert any(not torch.equal(first["weights"][name], value) for name, value in initial.items())
    for rank in (0, 1):  # GRPO: every process samples whole groups of its own prompts
        result = torch.load(tmp_path / f"grpo-rank{rank}.pt", weights_only=True)
        assert result["rows"] == [p for p in result["prompts"] for _ in range(GROUP_SIZE)]


def recording(rollout, rows: list):
    """`rollout`, also appending the prompts of each call to `rows`."""
    def record(prompts, ids):
        rows.append(prompts)
        return rollout(prompts, ids)
    return record


def main(out: Path) -> None:
    from tests.policy_helpers import ALGORITHMS, PROMPTS, make_policy, make_trainer

    torch.set_num_threads(1)
    for algorithm in ALGORITHMS:
        policy = make_policy()
        initial = {f"policy.{n}": p.detach().clone() for n, p in policy.named_parameters()}
        trainer = make_trainer(algorithm, policy=policy)
        rows = []
        trainer.rollout = recording(trainer.rollout, rows)
        trainer.train(2)
        prompts = trainer._batch_indices(0)
        weights = {n: p.detach().cpu() for n, p in trainer.policy_model.named_parameters()}
        rank = trainer.accelerator.process_index
        sampled = [PROMPTS.index(p) for p in rows[0]]  # the first iteration's rows, as prompt indices
        torch.save({"weights": weights, "initial": initial, "prompts": prompts, "rows": sampled,
                    "world_size": trainer.accelerator.num_processes}, out / f"{algorithm}-rank{rank}.pt")
        trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
