"""Ray bootstrap and placement: the only module that knows about bundles and resources.

``init_ray`` starts a local cluster on loopback for a run (or joins ``address``); ``place_workers`` reserves one
bundle per rollout/learner worker in a placement group so that N engines and M learners land where their
resources are (GPUs on a cluster, fractional CPUs on a laptop or CI machine).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import ray
import ray._private.ray_constants as ray_constants
from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR
from ray.exceptions import OutOfMemoryError, RayActorError
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

# Every process we start (and Ray's workers) runs one OpenMP thread: with 2 cores and the other one busy, torch ran
# up to 10x slower with 2 threads (docs/platform.md).
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "DS_ACCELERATOR": "cpu",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}


WORKER_LOST = (RayActorError, OutOfMemoryError)
"""A worker call that ends one of these lost its worker: it crashed, was killed, or Ray's memory monitor killed its
process when the node ran low (the call in flight raises ``OutOfMemoryError``, the actor is dead). Measured: a
16 GB process started beside a training run got its learner worker killed; the recovery is a crash's."""


def worker_env(device: str) -> dict[str, str]:
    env = {k: os.environ.get(k, v) for k, v in WORKER_ENV.items()}
    if device.startswith("cuda"):
        env.pop("DS_ACCELERATOR")
        for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND"):
            env.pop(k)
    if "HIERARL_SHARED" in os.environ:
        env["HIERARL_SHARED"] = os.environ["HIERARL_SHARED"]
    return env


def node_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or ``taskset``'s limit, not the host's
    count); on a local cluster, the workers' node."""
    return len(os.sched_getaffinity(0))


def job_env_vars(job_config_json: str) -> dict[str, str]:
    """The env vars of the runtime env ``ray job submit --runtime-env-json`` gave this job's driver (Ray passes the
    job config as JSON in ``RAY_JOB_CONFIG_JSON_ENV_VAR``). Ray refuses a driver runtime env that sets any of the
    same keys, so hierarl leaves those to the job: the user's value wins."""
    if not job_config_json:
        return {}
    runtime_env = json.loads(job_config_json).get("runtime_env") or {}
    return dict(runtime_env.get("env_vars") or {})


def init_ray(address: str = "", *, num_cpus: int | None = None, device: str = "cpu") -> dict[str, Any]:
    """Start (``address`` "" and no ``RAY_ADDRESS``) or join a Ray cluster; returns its resources.

    A local cluster is local: every Ray server (GCS, raylet, workers, agents, dashboard) listens on 127.0.0.1 only,
    and the dashboard runs there (its URL and the metrics export port are printed). Ray 2.60's token auth is
    disabled for local clusters (``RAY_AUTH_MODE=disabled``), as ``ray job submit`` to a local head would otherwise
    fail.
    """
    if ray.is_initialized():
        return ray.cluster_resources()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    runtime_env = {"env_vars": worker_env(device)}
    # No address: the cluster ``RAY_ADDRESS`` names (what ``ray job submit`` sets for the job's driver), else a new
    # local one ("local", so a stale head in Ray's current-cluster file is never joined by accident).
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address:
        job_vars = job_env_vars(os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR, ""))
        runtime_env["env_vars"] = {k: v for k, v in runtime_env["env_vars"].items() if k not in job_vars}
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        return ray.cluster_resources()
    # Ray turns a node address of 127.0.0.1 into the host's own address (services.resolve_ip_for_localhost), and
    # its servers then listen on every interface, unless "Ray clusters" are off, as on a laptop: the processes it
    # starts read the variable; this process imported Ray already, so its copy of the flag is set as well.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    ctx = ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        _node_ip_address="127.0.0.1",
        runtime_env=runtime_env,
        log_to_driver=True,
    )
    port = ctx.address_info.get("metrics_export_port")
    dashboard = f"http://{ctx.dashboard_url}" if ctx.dashboard_url else "did not start (see Ray's logs)"
    print(
        f"[hierarl] Ray dashboard: {dashboard} · hierarl metrics: http://127.0.0.1:{port}/metrics "
        "(hierarl_* series; docs/operations.md: Monitoring)",
        flush=True,
    )
    return ray.cluster_resources()


@dataclass(frozen=True)
class WorkerResources:
    """What one worker reserves: on a GPU cluster 1 GPU per engine/learner; on CPU a fraction of a core so that
    rollout workers and learners fit on a 2-core machine together (they take turns in a synchronous loop)."""

    num_cpus: float = 0.5
    num_gpus: float = 0.0
    concurrency_groups: tuple[tuple[str, int], ...] = ()
    """Named method groups that run beside the default one, (name, threads) each: a rollout worker's ``control``
    group takes weights and requests while its asynchronous collection runs (``max_staleness``)."""


def place_workers(
    cls: type, n: int, resources: WorkerResources, *args: Any, **kwargs: Any
) -> tuple[list[Any], PlacementGroup]:
    """Create ``n`` Ray actors of plain class ``cls`` in one PACK placement group (one bundle each); returns the
    actors and the group (to remove when done). ``resources.concurrency_groups``: see ``WorkerResources``."""
    bundle: dict[str, float] = {"CPU": resources.num_cpus}
    if resources.num_gpus:
        bundle["GPU"] = resources.num_gpus
    pg: PlacementGroup = placement_group([bundle] * n, strategy="PACK")
    ray.get(pg.ready(), timeout=300)
    actors = [spawn_in_bundle(cls, pg, i, n, resources, *args, **kwargs) for i in range(n)]
    return actors, pg


def spawn_in_bundle(
    cls: type, pg: PlacementGroup, index: int, n: int, resources: WorkerResources, *args: Any, **kwargs: Any
) -> Any:
    """Actor ``index`` of ``n`` in bundle ``index`` of ``pg``: how ``place_workers`` creates them, and how a dead
    one is replaced in the place it held."""
    groups = dict(resources.concurrency_groups)
    return (
        (ray.remote(concurrency_groups=groups)(cls) if groups else ray.remote(cls))
        .options(
            num_cpus=resources.num_cpus,
            num_gpus=resources.num_gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index),
        )
        .remote(*args, rank=index, world_size=n, **kwargs)
    )
