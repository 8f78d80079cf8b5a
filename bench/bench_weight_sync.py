"""Weight-sync latency against LoRA adapter size: learner → object store → rollout-worker-like actors → engine.

One push = ``ray.put`` of the adapter as a numpy dict (docs/platform.md: numpy dicts travel zero-copy, torch tensors
do not), then every receiving actor ``ray.get``s the ref and calls ``engine.load_adapter`` -- the path
``RolloutWorker.set_weights`` takes.  Measured per push (median over ``--repeats`` pushes, versions 1, 2, ...):

* ``put ms``: ``ray.put`` in the driver;
* ``deliver ms``: from the end of ``ray.put`` until the last actor holds the dict (``time.monotonic`` is one
  system-wide clock on Linux, so driver and actor timestamps compare);
* ``load ms``: ``engine.load_adapter`` in the actor (slowest actor): HF = ``set_peft_model_state_dict``;
  vLLM = the /dev/shm write of a PEFT folder + ``add_lora(load_inplace=True)``; ``shm ms`` is that write alone
  (``write_peft_adapter`` to a scratch /dev/shm folder);
* ``total ms``: driver wall clock from before ``ray.put`` until every actor returned.

Adapters: ``--ranks`` × ``--targets`` (``qv`` = q_proj, v_proj; ``all`` = the 7 attention + MLP projections) for
each ``--models`` entry; 1 and 2 receiving actors (the 1-actor case pushes to the first of the two).

    python bench/bench_weight_sync.py --models tiny,smollm2 --engines hf,vllm --out bench/results/weight_sync.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import setup

ROOT = setup()

TARGETS: dict[str, tuple[str, ...]] = {
    "qv": ("q_proj", "v_proj"),
    "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}


class Receiver:
    """A rollout worker reduced to its weight path: one engine, ``receive`` = fetch the ref + ``load_adapter``."""

    def __init__(self, engine_kind: str, model_path: str, rank: int, targets: tuple[str, ...]) -> None:
        from actors.engines import make_engine
        from actors.lora_weights import zero_lora_weights
        from common.lora import LoraSpec

        self.spec = LoraSpec(rank, 2 * rank, targets)
        self.engine = make_engine(engine_kind, model_path, self.spec, max_model_len=512)
        self.engine.load_adapter("policy", zero_lora_weights(model_path, self.spec), 0)

    def ready(self) -> bool:
        return True

    def receive(self, refs: list[Any], version: int) -> dict[str, float]:
        """``refs`` is wrapped in a list so Ray hands over the ref, not the value: the fetch is timed here."""
        import ray

        from actors.lora_weights import write_peft_adapter

        start = time.monotonic()
        weights = ray.get(refs[0])
        have = time.monotonic()
        ok = self.engine.load_adapter("policy", weights, version)
        loaded = time.monotonic()
        with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
            t = time.monotonic()
            write_peft_adapter(Path(tmp) / "a", weights, self.spec)
            shm = time.monotonic() - t
        return {"start": start, "have": have, "load_s": loaded - have, "shm_s": shm, "ok": float(ok)}

    def close(self) -> None:
        self.engine.close()


def random_adapter(model_path: str, rank: int, targets: tuple[str, ...]) -> dict[str, Any]:
    """LoRA tensors of the right PEFT names and shapes, small random values (both A and B non-zero)."""
    import numpy as np

    from actors.lora_weights import zero_lora_weights
    from common.lora import LoraSpec

    rng = np.random.default_rng(0)
    zeros = zero_lora_weights(model_path, LoraSpec(rank, 2 * rank, targets))
    return {k: (0.01 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in zeros.items()}


def bench_case(
    engine_kind: str, model_path: str, rank: int, target: str, args: argparse.Namespace
) -> dict[str, Any]:
    import ray

    weights = random_adapter(model_path, rank, TARGETS[target])
    size_mib = sum(v.nbytes for v in weights.values()) / 2**20
    actor_cls = ray.remote(num_cpus=1)(Receiver)
    t = time.perf_counter()
    actors = [
        actor_cls.remote(engine_kind, model_path, rank, TARGETS[target]) for _ in range(max(args.actors))
    ]
    ray.get([a.ready.remote() for a in actors])
    out: dict[str, Any] = {
        "size_mib": size_mib,
        "tensors": len(weights),
        "startup_s": time.perf_counter() - t,
    }
    version = 0
    try:
        for n in args.actors:
            pushes = []
            for _ in range(args.repeats + 1):
                version += 1
                t0 = time.monotonic()
                ref = ray.put(weights)
                t1 = time.monotonic()
                got = ray.get([a.receive.remote([ref], version) for a in actors[:n]])
                t2 = time.monotonic()
                del ref
                if not all(g["ok"] for g in got):
                    raise RuntimeError(f"load_adapter failed ({engine_kind}, r={rank}, {target})")
                pushes.append(
                    {
                        "put_s": t1 - t0,
                        "deliver_s": max(g["have"] for g in got) - t1,
                        "load_s": max(g["load_s"] for g in got),
                        "shm_s": max(g["shm_s"] for g in got),
                        "total_s": t2 - t0,
                    }
                )
            pushes = pushes[1:]  # the first push warms the object store and the load path
            out[str(n)] = {k: statistics.median(p[k] for p in pushes) for k in pushes[0]} | {"pushes": pushes}
    finally:
        for a in actors:
            ray.get(a.close.remote())
            ray.kill(a)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results/weight_sync.json")
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--ranks", default="8,64")
    parser.add_argument("--targets", default="qv,all")
    parser.add_argument("--actors", default="1,2")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.actors = [int(a) for a in args.actors.split(",")]
    import ray

    from actors.models import resolve_model_path

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    results: dict[str, Any] = {}
    try:
        for model in args.models.split(","):
            path = resolve_model_path(model)
            for kind in args.engines.split(","):
                for rank in (int(r) for r in args.ranks.split(",")):
                    for target in args.targets.split(","):
                        key = f"{model}|{kind}|r{rank}|{target}"
                        print(f"... {key}", flush=True)
                        results[key] = bench_case(kind, path, rank, target, args)
    finally:
        ray.shutdown()
    head = [
        "model",
        "engine",
        "rank",
        "targets",
        "MiB",
        "actors",
        "put ms",
        "deliver ms",
        "load ms",
        "shm ms",
    ]
    head += ["total ms"]
    rows = []
    for key, r in results.items():
        model, kind, rank, target = key.split("|")
        for n in args.actors:
            m = r[str(n)]
            rows.append(
                [model, kind, rank[1:], target, f"{r['size_mib']:.2f}", str(n)]
                + [f"{1e3 * m[k]:.1f}" for k in ("put_s", "deliver_s", "load_s", "shm_s", "total_s")]
            )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    path.write_text(json.dumps({"machine": machine, "settings": settings, "cases": results}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
