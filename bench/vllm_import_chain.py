"""vLLM's import chain for the lent GPU machine, followed on this CPU: which packages its offline generation path
with LoRA imports that the machine's image lacks (``bench/gpu_vllm_requirements.txt``), and where the chain stops
without a GPU.

The machine's Python sees its image (``IMAGE_PACKAGES``: the packages it was seen to hold) and what ``gpu_bundle.sh``
carries. This script rebuilds that view in a child ``python -S`` (no site-packages): this machine's installed
copies of the image's packages, linked one by one, with the image's own versions of the few whose imports differ
from the ones installed here (``IMAGE_PINNED``); the requirements' wheels for this Python (3.11; the bundle carries
the same versions for 3.12), each in a folder of its own; and the vLLM tree as the bundle carries it (pruned). It
imports ``ROOTS``: what hierarl imports (``vllm``, ``vllm.LLM``, ``vllm.lora.request``, ``vllm.inputs``) and the
modules an offline ``LLM`` with LoRA loads in its engine on CUDA (engine core, GPU worker and model runner, Llama,
LoRA layers and Triton kernels, attention backends, sampler, loader, compiler) and reports each as imported or
where it stopped. ``CUDA_VISIBLE_DEVICES`` is set empty so that vLLM keeps Triton on without a GPU driver (its
rule for a distributed set-up), as the machine's Triton would be. It then checks the vLLM API that
``actors.vllm_engine.VLLMEngine`` calls (``API``), and lists the CUDA extensions' shared libraries (why their import
stops here). ``--each`` hides each requirement in turn and records the first import that fails without it: the
evidence that it is needed. Writes JSON.

    bash bench/gpu_bundle.sh --vllm     # leaves the pruned tree in .gpu/build/vllm_tree
    python bench/vllm_import_chain.py --tree .gpu/build/vllm_tree --out bench/results/vllm_chain.json --each
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "bench" / "gpu_vllm_requirements.txt"

IMAGE_PACKAGES = ROOT / "bench" / "gpu_image_packages.txt"
"""The lent GPU machine's Python packages (its image 'cuda': bench/gpu_image_packages.txt)."""
IMAGE_PINNED = {"huggingface-hub": "1.33.0", "transformers": "5.17.0", "triton": "3.6.0"}
"""The image's own versions where this machine's differ in what they import: huggingface_hub 2.x imports httpx2,
which the image lacks (1.33 uses httpx); this machine has no Triton, and vLLM's kernels import it."""
ROOTS = (
    "vllm",
    "vllm.lora.request",
    "vllm.entrypoints.llm",
    "vllm.inputs",
    "vllm.v1.engine.core",
    "vllm.v1.engine.llm_engine",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.model_executor.models.llama",
    "vllm.model_executor.model_loader.default_loader",
    "vllm.lora.layers",
    "vllm.lora.worker_manager",
    "vllm.lora.punica_wrapper.punica_gpu",
    "vllm.lora.ops.triton_ops",
    "vllm.v1.attention.backends.flash_attn",
    "vllm.v1.attention.backends.triton_attn",
    "vllm.v1.sample.sampler",
    "vllm.compilation.backends",
    "vllm.platforms.cuda",
)
PLAT = ["--only-binary=:all:", "--implementation", "cp"] + [
    f"--platform=manylinux_2_{n}_x86_64" for n in (5, 12, 17, 24, 26, 27, 28, 31, 34, 35)
]
CHILD = r"""
import importlib, json, sys, traceback
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        print("CHAIN " + json.dumps({"module": name, "ok": True}), flush=True)
    except BaseException as e:
        frames = traceback.extract_tb(e.__traceback__)
        own = [f for f in frames if "/vllm/" in f.filename] or frames
        where = f"{own[-1].filename.split('/vllm/')[-1]}:{own[-1].lineno}" if own else "?"
        msg = str(e).splitlines()[0][:300] if str(e) else ""
        print("CHAIN " + json.dumps({"module": name, "ok": False, "error": type(e).__name__, "message": msg,
                                      "where": "vllm/" + where}), flush=True)
"""


def image_packages(path: Path = IMAGE_PACKAGES) -> set[str]:
    """The names in ``path`` (whitespace-separated; ``#`` starts a comment), normalized."""
    return {normalize(n) for line in path.read_text().splitlines() for n in line.split("#", 1)[0].split()}


API = r"""
import dataclasses, inspect, json
from vllm import LLM, SamplingParams
from vllm.engine.arg_utils import EngineArgs
from vllm.inputs import TokensPrompt
from vllm.lora.request import LoRARequest
from vllm.v1.engine.llm_engine import LLMEngine
fields = {f.name for f in dataclasses.fields(EngineArgs)}
checks = {
    f"LLM(..., {k}=)": k in fields
    for k in ("model", "dtype", "enable_prefix_caching", "max_model_len", "seed", "enable_lora", "max_lora_rank",
              "max_loras", "gpu_memory_utilization")
}
checks["LoRARequest(name, id, path, load_inplace=)"] = list(inspect.signature(LoRARequest).parameters)[:3] == [
    "lora_name", "lora_int_id", "lora_path"] and "load_inplace" in inspect.signature(LoRARequest).parameters
gen = inspect.signature(LLM.generate).parameters
checks["LLM.generate(prompts, params, lora_request=, use_tqdm=)"] = {"lora_request", "use_tqdm"} <= set(gen)
for m in ("get_tokenizer", "apply_model", "reset_prefix_cache"):
    checks[f"LLM.{m}"] = callable(getattr(LLM, m, None))
checks["LLMEngine.add_lora"] = callable(getattr(LLMEngine, "add_lora", None))
checks["SamplingParams(temperature, top_p, max_tokens, logprobs, seed)"] = {
    "temperature", "top_p", "max_tokens", "logprobs", "seed"} <= set(SamplingParams.__annotations__)
checks["TokensPrompt(prompt_token_ids=)"] = "prompt_token_ids" in TokensPrompt.__annotations__
print("API " + json.dumps(checks), flush=True)
"""
"""What ``actors.vllm_engine.VLLMEngine`` calls, checked against the vLLM tree: every keyword ``LLM`` is given, the
LoRA request it builds, the methods it calls, the sampling fields and prompt type it uses."""


def normalize(name: str) -> str:
    """PEP 503 name: ``Typing_Inspection`` → ``typing-inspection``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(path: Path = REQUIREMENTS) -> list[tuple[str, str]]:
    """``name==version`` lines (comments and blank lines skipped) as (normalized name, version); anything but an
    exact pin is refused: the bundle must carry one known version of each."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        name, sep, version = spec.partition("==")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()) or not version.strip():
            raise ValueError(f"{path.name}:{n}: {spec!r} is not an exact pin NAME==VERSION")
        out.append((normalize(name), version.strip()))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{path.name}: a package listed twice")
    return out


def link_plan(owners: dict[str, set[str]], wanted: set[str]) -> dict[str, str]:
    """Which top-level entries of site-packages to expose: ``owners`` maps each entry (``torch``,
    ``torch-2.13.0.dist-info``, ``google``) to the distributions with files in it. An entry whose owners are all
    wanted is linked whole ("whole"); one shared with unwanted distributions (a namespace such as ``google``) is
    made a folder and only the wanted ones' sub-entries linked ("split"); the rest stay hidden."""
    plan = {}
    for entry, dists in owners.items():
        if dists and dists <= wanted:
            plan[entry] = "whole"
        elif dists & wanted:
            plan[entry] = "split"
    return plan


def image_view(dest: Path, names: set[str]) -> dict[str, str]:
    """``dest`` holds links to this machine's installed copies of the packages in ``names``; returns their
    versions here."""
    owners: dict[str, set[str]] = {}
    subs: dict[tuple[str, str], set[str]] = {}
    site = Path(md.distribution("numpy").locate_file(""))
    versions = {}
    for dist in md.distributions():
        name = normalize(dist.metadata["Name"])
        if name in names:
            versions[name] = dist.version
        for f in dist.files or ():
            if f.parts[0] == ".." or "__pycache__" in f.parts:
                continue
            owners.setdefault(f.parts[0], set()).add(name)
            if len(f.parts) > 1:
                subs.setdefault((f.parts[0], name), set()).add(f.parts[1])
    dest.mkdir(parents=True, exist_ok=True)
    for entry, how in link_plan(owners, names).items():
        if not (site / entry).exists() or (dest / entry).exists():
            continue
        if how == "whole":
            (dest / entry).symlink_to(site / entry)
            continue
        (dest / entry).mkdir()
        for name in owners[entry] & names:
            for sub in subs.get((entry, name), ()):
                if (site / entry / sub).exists() and not (dest / entry / sub).exists():
                    (dest / entry / sub).symlink_to(site / entry / sub)
    return versions


def install(specs: list[str], dest: Path) -> None:
    """Wheels of ``specs`` for this Python, no dependencies, into ``dest``."""
    wheels = dest.parent / f"{dest.name}.wheels"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "download", "--no-deps", *PLAT, "-d", str(wheels), *specs], check=True)
    found = sorted(str(w) for w in wheels.glob("*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--no-compile", "--target", str(dest), *found], check=True)


def _child(path: list[Path], code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` in a ``python -S`` child that sees only ``path``."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VLLM_"))},
        "PYTHONPATH": os.pathsep.join(map(str, path)),
        "CUDA_VISIBLE_DEVICES": "",
    }
    return subprocess.run(
        [sys.executable, "-S", "-c", code, *args], capture_output=True, text=True, env=env, timeout=900
    )


def api(path: list[Path]) -> dict[str, bool]:
    """The ``API`` checks' results."""
    proc = _child(path, API)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("API ")), None)
    if line is None:
        raise RuntimeError(f"the API check died (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[4:])


def chain(path: list[Path], roots: tuple[str, ...] = ROOTS) -> list[dict]:
    """Each root imported in order in one child that sees only ``path``."""
    proc = _child(path, CHILD, *roots)
    rows = [json.loads(line[6:]) for line in proc.stdout.splitlines() if line.startswith("CHAIN ")]
    if len(rows) != len(roots):
        raise RuntimeError(f"the import child died (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return rows


def shared_libraries(tree: Path) -> dict[str, list[str]]:
    """The CUDA extensions' NEEDED libraries (``readelf -d``): why their import stops on a machine without the
    NVIDIA driver and CUDA torch."""
    out = {}
    for so in sorted(tree.glob("vllm/**/*.abi3.so")):
        dyn = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
        out[str(so.relative_to(tree))] = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tree", type=Path, required=True, help="the folder holding vllm/ as the bundle carries it"
    )
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--each", action="store_true", help="also each requirement hidden in turn")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vllm_chain.json")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="vllm_chain_"))
    t0 = time.perf_counter()
    image = work / "image"
    names = image_packages()
    local = image_view(image, names - set(IMAGE_PINNED))
    install([f"{n}=={v}" for n, v in IMAGE_PINNED.items()], work / "image_pinned")
    reqs = requirements()
    for name, version in reqs:
        if not (work / "req" / name).exists():
            install([f"{name}=={version}"], work / "req" / name)
    base = [work / "image_pinned", image]
    path = [a.tree, *(work / "req" / n for n, _ in reqs), *base]
    report: dict = {
        "python": sys.version.split()[0],
        "image_packages_here": local,
        "image_pinned": IMAGE_PINNED,
        "image_packages_missing_here": sorted(names - set(local) - set(IMAGE_PINNED)),
        "requirements": dict(reqs),
        "chain": chain(path),
        "api": api(path),
        "shared_libraries": shared_libraries(a.tree),
    }
    for row in report["chain"]:
        print(("ok    " if row["ok"] else "STOP  ") + row["module"] + ("" if row["ok"] else f"  {row}"))
    for what, ok in report["api"].items():
        print(f"{'ok' if ok else 'MISSING':<6}{what}")
    if a.each:
        report["without"] = {}
        for name, _ in reqs:
            rows = chain([p for p in path if p.name != name or p.parent.name != "req"])
            first = next((r for r in rows if not r["ok"] and r["module"] != "vllm.platforms.cuda"), None)
            report["without"][name] = first
            print(
                f"without {name:<20} "
                + (f"{first['module']}: {first['message']} at {first['where']}" if first else "all import")
            )
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
