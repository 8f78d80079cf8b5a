"""docs/results: the main job's pages recomputed from their JSON: main_job_learns' headline tables (three seeds on
HF, their negated control, the tuning runs, the fourth seed, the slow host), main_job_replay's two replay tables and
view_keep_cost's table.

Gains are rebuilt from the per-task rates with ``results_pages.paired`` (not the project's ``paired_gain``), and
each printed digit is checked, so a figure copied from another run or rounded wrongly fails."""

from __future__ import annotations

import statistics

from tests.unit.results_pages import (
    assert_shows,
    data,
    flat,
    interval,
    numbers,
    page,
    paired,
    row,
    wilson,
)

LEARNS = "main_job_learns.md"


def section(text: str, heading: str) -> str:
    return text.split(f"{heading}\n")[1].split("\n## ")[0]


def by_task(runs: list[list[dict]], at: int, key: str) -> list[float]:
    """Each task's rate averaged over the seeds first (the pages' "tasks, mean over the 3 seeds")."""
    return [statistics.mean(r[at][key][i] for r in runs) for i in range(len(runs[0][at][key]))]


def minutes(seconds: float) -> list[str]:
    """'16 min 10 s' as the numbers the page prints: 970.1 s → ['16', '10']."""
    return [str(n) for n in divmod(round(seconds), 60)]


def hf_runs(arm: str = "hiper") -> list[list[dict]]:
    runs = data("main_job_learns/learning.json")["runs"]
    return [runs[f"{arm}_seed{s}"] for s in (0, 1, 2)]


def test_main_job_learns_three_seeds_table():
    """Each seed's held-out and RL-task rates after BC and after RL, both paired gains, the random policy and the
    wall clock (runs.json), then the by-task row over the seeds."""
    text = section(page(LEARNS), "## Three seeds")
    runs = hf_runs()
    walls = data("main_job_learns/runs.json")["runs"]
    for seed, run in enumerate(runs):
        bc, rl = run[0], run[-1]
        cells = row(text, str(seed))
        assert_shows(
            [cells[1], cells[2], *numbers(cells[4]), cells[6]],
            [
                statistics.mean(bc["eval_task_rates"]),
                statistics.mean(rl["eval_task_rates"]),
                statistics.mean(bc["rl_task_rates"]),
                statistics.mean(rl["rl_task_rates"]),
                bc["eval_random"],
            ],
        )
        assert_shows(numbers(cells[3]), paired(bc["eval_task_rates"], rl["eval_task_rates"]))
        assert_shows(numbers(cells[5]), paired(bc["rl_task_rates"], rl["rl_task_rates"]))
        assert numbers(cells[7]) == minutes(walls[f"hiper_seed{seed}"]["wall_s"])
    cells = row(text, "tasks, mean over the 3 seeds")
    held = [by_task(runs, 0, "eval_task_rates"), by_task(runs, -1, "eval_task_rates")]
    rl_tasks = [by_task(runs, 0, "rl_task_rates"), by_task(runs, -1, "rl_task_rates")]
    assert_shows(
        [cells[1], cells[2], *numbers(cells[4])],
        [*map(statistics.mean, held), *map(statistics.mean, rl_tasks)],
    )
    assert_shows(numbers(cells[3]), paired(*held))
    assert_shows(numbers(cells[5]), paired(*rl_tasks))
    # "What it shows": the same pooled gain, 9 of 16 tasks changed (each task's mean over the seeds moved).
    changed = sum(b != a for b, a in zip(*held, strict=True))
    assert f"**{interval(paired(*held))}** ({changed} of 16 tasks changed)" in flat(page(LEARNS))


def test_main_job_learns_what_it_shows_figures():
    """The prose under the tables: seeds 0 and 1's Wilson intervals (32 episodes each), the RL tasks no seed ever won,
    each update's KL (runs.json) with the first update's 2–25× over a later one, seed 0's first-update KEEP-copy
    and action KLs, and the switch rates."""
    text = flat(section(page(LEARNS), "## What it shows"))
    runs = hf_runs()
    after = [round(statistics.mean(r[-1]["eval_task_rates"]) * 32) for r in runs]  # wins of 16 tasks x 2
    printed = numbers(text.split("the Wilson intervals of seeds 0 and 1, ")[1].split(", exclude")[0])
    assert_shows(printed, [*wilson(after[0], 32), *wilson(after[1], 32)])
    never = [i for i in range(8) if all(r[at]["rl_task_rates"][i] == 0 for r in runs for at in (0, -1))]
    assert f"{len(never)} of the 8 are never won by any seed" in text
    iterations = [
        data("main_job_learns/runs.json")["runs"][f"hiper_seed{s}"]["iterations"] for s in (0, 1, 2)
    ]
    kls = [[it["kl_update"] for it in seed] for seed in iterations]
    printed = text.split("Update KL per iteration (runs.json): ")[1].split(". The 2-step")[0]
    assert_shows([n for n in numbers(printed) if "e" in n], [kl for seed in kls for kl in seed])
    ratios = [seed[0] / later for seed in kls for later in seed[1:]]  # 2.3 (seed 0) ... 25.4 (seed 2)
    assert f"{round(min(ratios))}–{round(max(ratios))}× as far as a later one" in text
    first = iterations[0][0]
    assert_shows(
        numbers(text.split("(`kl_update/subgoal_keep` ")[1].split("; on every")[0]),
        [first["kl_update/subgoal_keep"], first["kl_update/action"]],
    )
    switch = [[100 * it["switch_rate"] for it in seed] for seed in iterations]
    low_seeds = [r for seed in switch[1:] for r in seed]
    assert (
        f"switch on {min(low_seeds):.0f}–{max(low_seeds):.0f} % of turns "
        f"(seed 0: {min(switch[0]):.0f}–{max(switch[0]):.0f} %)"
    ) in text


def test_main_job_learns_negated_control_table():
    """Each negated run's held-out rates and gain over BC, its RL-task rate after RL and train success per iteration,
    and true minus negated after RL (held-out and RL tasks), per seed and by task over seeds; control.json holds the
    same true-minus-negated gains."""
    text = section(page(LEARNS), "## The negated control")
    true, neg = hf_runs(), hf_runs("hiper-negated")
    control = data("main_job_learns/control.json")
    for seed in (0, 1, 2):
        cells = row(text, str(seed))
        bc, rl = neg[seed][0], neg[seed][-1]
        assert_shows(
            [*numbers(cells[1]), cells[3], *numbers(cells[4])],
            [
                statistics.mean(bc["eval_task_rates"]),
                statistics.mean(rl["eval_task_rates"]),
                statistics.mean(rl["rl_task_rates"]),
                *[r["train_success"] for r in neg[seed][1:]],
            ],
        )
        assert_shows(numbers(cells[2]), paired(bc["eval_task_rates"], rl["eval_task_rates"]))
        for col, key, panel in ((5, "eval_task_rates", "held_out"), (6, "rl_task_rates", "rl_tasks")):
            gain = paired(rl[key], true[seed][-1][key])
            assert_shows(numbers(cells[col]), gain)
            kept = control[panel]["per_seed"][f"seed{seed}"]
            assert_shows(numbers(cells[col]), [kept["mean"], kept["low"], kept["high"]])
    cells = row(text, "tasks, mean over seeds")
    held = [by_task(neg, 0, "eval_task_rates"), by_task(neg, -1, "eval_task_rates")]
    rl_after = statistics.mean(by_task(neg, -1, "rl_task_rates"))
    assert_shows([*numbers(cells[1]), cells[3]], [*map(statistics.mean, held), rl_after])
    assert_shows(numbers(cells[2]), paired(*held))
    for col, key in ((5, "eval_task_rates"), (6, "rl_task_rates")):
        assert_shows(numbers(cells[col]), paired(by_task(neg, -1, key), by_task(true, -1, key)))


def test_main_job_learns_tuning_runs():
    """t1–t3 from tuning/learning.json (t1's held-out panel is 8 tasks, t3 has no fixed RL tasks), and the row that
    repeats seed 0."""
    text = section(page(LEARNS), "## How the setting was chosen (seed 0)")
    runs = data("main_job_learns/tuning/learning.json")["runs"]
    for name, run in runs.items():
        cells = row(text, name)
        bc, rl = run[0], run[-1]
        held = numbers(cells[2])
        assert_shows(held[:3], paired(bc["eval_task_rates"], rl["eval_task_rates"]))
        assert held[3:] == ([str(len(bc["eval_task_rates"]))] if len(bc["eval_task_rates"]) != 16 else [])
        if bc["rl_task_rates"] is None:
            assert cells[3] == "–"
        else:
            assert_shows(numbers(cells[3]), paired(bc["rl_task_rates"], rl["rl_task_rates"]))
    seed0 = hf_runs()[0]
    cells = row(text, "seed 0 above")
    assert_shows(numbers(cells[2]), paired(seed0[0]["eval_task_rates"], seed0[-1]["eval_task_rates"]))
    assert_shows(numbers(cells[3]), paired(seed0[0]["rl_task_rates"], seed0[-1]["rl_task_rates"]))


def test_main_job_learns_fourth_seed_and_slow_host():
    """Seed 3 (seed3/learning.json) and the README's command on a slow host (readme_run_slow_host.json): rates,
    paired gains, changed tasks, the command's wall clock and the phase times the page compares."""
    text = flat(page(LEARNS))
    run = data("main_job_learns/seed3/learning.json")["runs"]["hiper_seed3"]
    bc, rl = run[0], run[-1]
    held, rl_tasks = bc["eval_task_rates"], bc["rl_task_rates"]
    changed = sum(b != a for b, a in zip(held, rl["eval_task_rates"], strict=True))
    assert (
        f"held-out {statistics.mean(held):.3f} → {statistics.mean(rl['eval_task_rates']):.3f}, **RL gain "
        f"{interval(paired(held, rl['eval_task_rates']))}** ({changed} of 16 tasks changed); RL tasks "
        f"{statistics.mean(rl_tasks):.3f} → {statistics.mean(rl['rl_task_rates']):.3f}, "
        f"{interval(paired(rl_tasks, rl['rl_task_rates']))}"
    ) in text
    slow = data("main_job_learns/readme_run_slow_host.json")
    bc, *iterations = slow["rows"]
    rl = iterations[-1]
    m, s = minutes(slow["command_wall_s"])
    assert f"the command took **{m} min {s} s**" in text
    assert (
        f"(install with cached packages and Ray's start under {slow['install_and_start_s_upper_bound']} s)"
        in text
    )
    assert (
        f"held-out {bc['eval_success']:.3f} → {rl['eval_success']:.3f}, **RL gain "
        f"{interval(paired(bc['eval_task_rates'], rl['eval_task_rates']))}**, RL tasks "
        f"{interval(paired(bc['train_eval_task_rates'], rl['train_eval_task_rates']))}"
    ) in text
    rollouts = [it["time_rollout"] for it in iterations]
    updates = [it["time_update"] for it in iterations]
    assert f"rollouts {min(rollouts):.0f}–{max(rollouts):.0f} s against 9–14 s" in text
    assert f"the final evaluation {rl['time_eval']:.0f} s against 35 s" in text
    assert f"the updates {min(updates):.0f}–{max(updates):.0f} s against" in text


def replay_row(text: str, variant: str, repeat: bool) -> list[str]:
    """The table row of one replayed variant; the repeat of ``hiper`` is the row in the other mini-batch order."""
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith(f"| `{variant}`") and ("other mini-batch order" in line) == repeat
    ]
    assert len(rows) == 1, (variant, repeat, rows)
    return rows[0]


def test_main_job_replay_tables():
    """Both replay tables: actor lr and optimizer steps from each row's overrides and metrics, the update's KL and
    its action tokens', and Δ log P of the expert's response, action and subgoal; the rows' wall times."""
    text = page("main_job_replay.md")
    eight, thirty_two = text.split("**32 episodes.**")
    for part, name in ((eight, "replay_8episodes"), (thirty_two, "replay_32episodes")):
        for r in data(f"main_job_replay/{name}.json")["rows"]:
            cells = replay_row(part, r["variant"].split("#")[0], bool(r["repeat"]))
            lr = next((o.split("=")[1] for o in r["overrides"] if o.startswith("learner.actor_lr=")), "5e-5")
            assert cells[1] == lr
            m, p = r["metrics"], r["probe"]
            assert_shows(
                cells[2:],
                [
                    m["optimizer_steps"],
                    m["kl_update"],
                    m["kl_update/action"],
                    p["response/all"],
                    p["action/all"],
                    p["subgoal/all"],
                ],
            )
    walls = [r["wall_s"] / 60 for r in data("main_job_replay/replay_32episodes.json")["rows"]]
    assert f"Each row below {min(walls):.0f}–{max(walls):.0f} min" in flat(thirty_two)
    total = sum(r["wall_s"] for r in data("main_job_replay/replay_8episodes.json")["rows"]) / 60
    assert f"({total:.0f} min for the six rows below)" in flat(eight)


def test_view_keep_cost_table():
    """The kept episodes' write time and bytes against the run's iteration time and folder (cost.json)."""
    text = page("view_keep_cost.md")
    cost = data("view_keep_cost/cost.json")
    per = cost["per_iteration"].values()
    time, disk = row(text, "time"), row(text, "disk")
    assert {(p["kept"], p["episodes"]) for p in per} == {tuple(int(n) for n in numbers(time[1]))}
    assert_shows(
        numbers(time[2])[:1] + numbers(time[3]),
        [cost["write_s"], cost["iterations_s"], 100 * cost["time_share"]],
    )
    assert_shows(
        numbers(disk[1]) + numbers(disk[3]),
        [
            cost["kept_bytes"] / 1e6,
            min(p["bytes"] for p in per) / 1e6,
            max(p["bytes"] for p in per) / 1e6,
            cost["run_folder_bytes"] / 1e6,
            100 * cost["disk_share"],
        ],
    )
