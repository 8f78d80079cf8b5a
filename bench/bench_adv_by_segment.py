"""Where each algorithm puts a batch's credit: the mean advantage of the action tokens per turn, by outcome (won /
lost) and by subgoal segment (first / middle / last), from a cold critic (every value 0, as the first RL update of
a run without ``learner.critic_warmup_passes`` reads it). Pure arithmetic on a run's saved trajectories, seconds.

    python bench/bench_adv_by_segment.py --run RUN --iteration 1 --out docs/results/<study>/advantages_by_segment.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _env import setup

ROOT = setup()

from bench_prompts import cpu_model  # noqa: E402

ALGOS = {
    # HiPER's default: the low level's segment end bootstrapped from the high level's lambda-return
    "hiper": {},
    # the paper's Eq. 7: the segment end bootstrapped from V_high alone
    "hiper/low_bootstrap=v_high": {"low_bootstrap": "v_high"},
    # PPO as the study presets pair it with HiPER: the same reward terms, the step-limit cut terminal
    "ppo": {"reward_terms": ["format", "keep", "keep_consistency"], "truncation": "terminal"},
    # GiGPO as gigpo_textcraft_d2 runs it: the same reward terms, no critic (episode + anchor-state groups)
    "gigpo": {"reward_terms": ["format", "keep", "keep_consistency"]},
    # ... with its all-equal-outcome groups' episode term kept (the plain GiGPO advantage)
    "gigpo/equal_outcome_groups=keep": {
        "reward_terms": ["format", "keep", "keep_consistency"],
        "equal_outcome_groups": "keep",
    },
}


def segment_of(traj, j: int) -> str:
    seg, last = traj.turns[j].segment_index, traj.turns[-1].segment_index
    return "first segment" if seg == 0 else ("last segment" if seg == last else "middle")


def main(argv: list[str] | None = None) -> int:
    from actors.trajectory import read_jsonl
    from launch.config import resolve_algo_config
    from learners.algos.registry import get_algo
    from learners.diagnostics import token_groups
    from learners.prepare import learner_batch, shaped_turns
    from learners.targets import sequences

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--iteration", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    trajs_path = a.run / "trajectories" / f"iter_{a.iteration}.jsonl"
    out = {}
    for name, overrides in ALGOS.items():
        trajs = list(read_jsonl(trajs_path))
        algo = get_algo(name.split("/")[0])
        cfg = resolve_algo_config(algo.Config, overrides)
        turns = shaped_turns(trajs, cfg, success_reward=1.0, max_len=4096, pad_id=0)
        seqs = sequences(turns, algo.value_slots)
        lp = turns.old_logprobs.numpy()
        values = np.zeros((len(seqs), len(algo.value_slots)), np.float32)
        batch, _ = learner_batch(algo, cfg, trajs, turns, seqs, lp, lp, values)
        action = token_groups(trajs, turns)["action"]
        cells: dict[str, list[float]] = {}
        for b, (i, j) in enumerate(turns.index):
            if action[b].any():
                key = f"{'won' if trajs[i].won else 'lost'} / {segment_of(trajs[i], j)}"
                cells.setdefault(key, []).append(float(batch.token_adv[b][action[b]].mean()))
        out[name] = {
            k: {"turns": len(v), "mean_action_adv": round(float(np.mean(v)), 3)}
            for k, v in sorted(cells.items())
        }
        print(name, json.dumps(out[name]))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "what": __doc__.split("\n\n")[0],
                "trajectories": str(trajs_path),
                "cpu": f"{cpu_model()} (lscpu model name)",
                "by_algorithm": out,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
