"""Our pairwise-comparison reward learner next to imitation's (HumanCompatibleAI), on the same data.

The correctness anchor for paper 02: on the same Pendulum segments, the same uniformly drawn
pairs and the same noise-free labels, our ``RewardLearner`` on PCQ answers must reach imitation's
held-out preference accuracy within 2 points. Both learn one 2 x 32 MLP reward on (s, a) with the
Bradley-Terry cross-entropy, Adam(W) lr 1e-3, batches of 32, the same number of epochs.

imitation pins its own Stable-Baselines3/gymnasium versions, so it runs in its own virtual
environment; the data go through an ``.npz`` file:

    python -m venv /tmp/imit && /tmp/imit/bin/pip install torch==2.13.0 imitation
    python benchmarks/distinguishability_vs_imitation.py --peer-python /tmp/imit/bin/python

Prints, per seed and number of pairs, the held-out pairwise accuracy of both and the difference.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

EPOCHS = 30


def peer_side(data_path: str, out_path: str) -> None:
    """Runs inside imitation's environment: no icml25 import."""
    import gymnasium as gym
    import torch as th
    from imitation.algorithms import preference_comparisons as pc
    from imitation.data.types import TrajectoryWithRew
    from imitation.rewards.reward_nets import BasicRewardNet

    d = np.load(data_path)
    th.manual_seed(int(d["seed"]))
    env = gym.make("Pendulum-v1")
    net = BasicRewardNet(env.observation_space, env.action_space, hid_sizes=(32, 32))
    model = pc.PreferenceModel(net)
    rng = np.random.default_rng(int(d["seed"]))
    trainer = pc.BasicRewardTrainer(
        model, pc.CrossEntropyRewardLoss(), rng, batch_size=32, epochs=EPOCHS, lr=1e-3
    )

    def frag(obs, act, rew):
        return TrajectoryWithRew(
            obs=np.concatenate([obs, obs[-1:]]), acts=act, infos=None, terminal=False, rews=rew
        )

    pool_obs, pool_act, pool_rew = d["pool_obs"], d["pool_act"], d["pool_rew"]
    pairs, y = d["pairs"], d["y"]
    ds = pc.PreferenceDataset()
    ds.push(
        [
            (
                frag(pool_obs[i], pool_act[i], pool_rew[i]),
                frag(pool_obs[j], pool_act[j], pool_rew[j]),
            )
            for i, j in pairs
        ],
        y.astype(np.float32),
    )
    trainer.train(ds)
    held_obs, held_act = d["held_obs"], d["held_act"]
    n, h = held_obs.shape[:2]
    with th.no_grad():
        o = th.as_tensor(held_obs.reshape(n * h, -1))
        a = th.as_tensor(held_act.reshape(n * h, -1))
        r = net(o, a, o, th.zeros(n * h)).reshape(n, h).sum(1).numpy()
    Path(out_path).write_text(json.dumps({"pred": r.tolist()}))


def pair_accuracy(pred: np.ndarray, true: np.ndarray) -> float:
    dp, dt = pred[:, None] - pred[None], true[:, None] - true[None]
    mask = dt != 0
    return float(((dp > 0) == (dt > 0))[mask].mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-python", help="python of a virtual environment with imitation")
    ap.add_argument("--peer-side", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    if args.peer_side:
        peer_side(*args.peer_side)
        return 0
    if not args.peer_python:
        ap.error("--peer-python is required (see the module docstring)")
    import torch

    from icml25.distinguishability import (
        PairwiseQuery,
        RewardEnsemble,
        RewardLearner,
        ScriptedTeacher,
    )
    from icml25.distinguishability.experiment import split
    from icml25.distinguishability.segments import collect_segments

    torch.set_num_threads(2)
    print("| seed | pairs | ours: held-out pair accuracy | imitation | ours - imitation |")
    print("|---|---|---|---|---|")
    diffs = []
    for seed in range(args.seeds):
        buf = collect_segments(n_episodes=120, segment_len=25, seed=seed)
        pool, held = split(buf, 0.7, seed)
        for n_pairs in (60, 240):
            g = np.random.default_rng(seed)
            idx = g.integers(0, len(pool), size=(n_pairs, 2))
            queries = [PairwiseQuery(int(a), int(b)) for a, b in idx]
            answers = ScriptedTeacher.preset("oracle").answer_pcq(pool, queries)
            y = np.array([a.y for a in answers])
            torch.manual_seed(seed)
            ens = RewardEnsemble(3, 1, n_members=1, hidden=32, n_layers=2, activation="none")
            learner = RewardLearner(ens, lr=1e-3, batch_size=32, max_epochs=EPOCHS, stop_acc=None)
            learner.add(queries, answers)
            learner.train(pool)
            with torch.no_grad():
                ours = ens.segment_returns(held.obs, held.act).mean(0).double().numpy()
            true = held.returns().double().numpy()
            with tempfile.TemporaryDirectory() as tmp:
                data, out = Path(tmp) / "data.npz", Path(tmp) / "out.json"
                np.savez(
                    data,
                    seed=seed,
                    pool_obs=pool.obs.numpy(),
                    pool_act=pool.act.numpy(),
                    pool_rew=pool.true_rew.numpy(),
                    held_obs=held.obs.numpy(),
                    held_act=held.act.numpy(),
                    pairs=idx,
                    y=y,
                )
                subprocess.run(
                    [args.peer_python, __file__, "--peer-side", str(data), str(out)],
                    check=True,
                    capture_output=True,
                )
                theirs = np.array(json.loads(out.read_text())["pred"])
            a_ours, a_theirs = pair_accuracy(ours, true), pair_accuracy(theirs, true)
            diffs.append(a_ours - a_theirs)
            print(
                f"| {seed} | {n_pairs} | {a_ours:.3f} | {a_theirs:.3f} | {a_ours - a_theirs:+.3f} |",
                flush=True,
            )
    print(f"\nmean difference {np.mean(diffs):+.3f}, largest gap {np.max(np.abs(diffs)):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
