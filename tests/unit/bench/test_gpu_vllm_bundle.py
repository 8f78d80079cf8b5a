"""The vLLM bundle's pure parts: its requirements file (exact pins, one version each), the lent machine's package
view that ``bench/vllm_import_chain.py`` rebuilds, and ``bench/gpu_vllm_swap.py``'s tolerances, which must stay those
of the CPU tests they are compared with."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from vllm_import_chain import image_packages, link_plan, normalize, requirements  # noqa: E402


def test_names_normalize_as_pep_503():
    assert normalize("Typing_Inspection") == "typing-inspection"
    assert normalize("partial-json-parser") == normalize("partial_json.parser") == "partial-json-parser"


def test_the_requirements_file_pins_each_package_once():
    reqs = dict(requirements())
    assert reqs["msgspec"] == "0.22.0" and reqs["apache-tvm-ffi"] == "0.1.10"  # the version vLLM 0.26.0 pins
    assert reqs["xgrammar"] == "0.2.7"  # 0.2.8 needs apache-tvm-ffi>=0.1.11, against vLLM's pin
    assert reqs["openai"].startswith("2.")  # 3.x imports httpx2, which the machine's image lacks
    assert "vllm" not in reqs and "torch" not in reqs  # the wheel travels unpacked; torch is the machine's


def test_the_requirements_are_not_in_the_machine_image():
    """A package the image already has must not travel again (two versions would stop the install)."""
    assert not set(dict(requirements())) & image_packages()
    assert {"torch", "triton", "transformers", "numpy", "huggingface-hub"} <= image_packages()


@pytest.mark.parametrize(
    ("line", "match"),
    [("fastapi>=0.133\n", "exact pin"), ("msgspec==\n", "exact pin"), ("a==1\nA==2\n", "listed twice")],
)
def test_loose_or_repeated_requirements_are_refused(tmp_path, line, match):
    path = tmp_path / "req.txt"
    path.write_text("# a comment\n\n" + line)
    with pytest.raises(ValueError, match=match):
        requirements(path)


def test_comments_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "req.txt"
    path.write_text("# header\n\nmsgspec==0.22.0   # why\n  Pydantic_Core==2.46.4\n")
    assert requirements(path) == [("msgspec", "0.22.0"), ("pydantic-core", "2.46.4")]


def test_link_plan_exposes_wanted_packages_and_splits_shared_namespaces():
    owners = {
        "torch": {"torch"},
        "torch-2.13.0.dist-info": {"torch"},
        "google": {"protobuf", "google-api-core"},  # a namespace: protobuf in the image, google-api-core not
        "ray": {"ray"},
    }
    plan = link_plan(owners, {"torch", "protobuf"})
    assert plan == {"torch": "whole", "torch-2.13.0.dist-info": "whole", "google": "split"}


def _constant(path: Path, name: str) -> float:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


@pytest.mark.parametrize("name", ["ENGINE_TOL", "REF_TOL"])
def test_the_gpu_script_uses_the_cpu_tests_tolerances(name):
    assert _constant(ROOT / "bench" / "gpu_vllm_swap.py", name) == _constant(
        ROOT / "tests" / "ray" / "test_learner.py", name
    )
