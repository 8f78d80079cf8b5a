"""``bench/gpu_parts.py``: a bundle split into parts for the lent GPU machine, received one call at a time, joined
only when every part is there and its sha256 matches; a cold machine (earlier parts gone) is said and repaired,
never half installed."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import gpu_parts
from gpu_parts import MANIFEST, MISSING, Manifest, join, part_name, receive, split


def _stream(tmp_path: Path, n: int = 1000, seed: int = 0) -> Path:
    data = bytes((i * 7 + seed * 13 + (i >> 3)) % 256 for i in range(n))
    path = tmp_path / f"stream{seed}.tar"
    path.write_bytes(data)
    return path


def _call(parts: Path, index: str, tmp_path: Path) -> Path:
    """The working tree of one call: only the part folder that call carries."""
    tree = tmp_path / f"call_{index}"
    (tree / index).mkdir(parents=True, exist_ok=True)
    for f in (parts / index).iterdir():
        (tree / index / f.name).write_bytes(f.read_bytes())
    return tree


def test_split_sizes_names_and_manifest(tmp_path):
    stream = _stream(tmp_path)
    m = split(stream, tmp_path / "out", part_bytes=300)
    # 1000 bytes / 300 = 3 full parts + 100 bytes
    assert [n for n, _ in m.parts] == ["part.01", "part.02", "part.03", "part.04"]
    sizes = [(tmp_path / "out" / n[5:] / n).stat().st_size for n, _ in m.parts]
    assert sizes == [300, 300, 300, 100]
    assert m.whole == hashlib.sha256(stream.read_bytes()).hexdigest()
    assert m.parts[1][1] == hashlib.sha256(stream.read_bytes()[300:600]).hexdigest()
    for n, _ in m.parts:  # every call carries the whole manifest
        assert Manifest.parse((tmp_path / "out" / n[5:] / MANIFEST).read_text()) == m


def test_part_names_sort_in_stream_order():
    assert part_name(3, 12) == "part.03"
    assert part_name(7, 123) == "part.007"
    assert sorted(part_name(i, 12) for i in (10, 2, 1)) == ["part.01", "part.02", "part.10"]


def test_parts_received_call_by_call_then_joined(tmp_path):
    stream = _stream(tmp_path)
    split(stream, tmp_path / "out", 300)
    store = tmp_path / "store"
    missing = []
    for k in ("01", "02", "03", "04"):
        got = receive(_call(tmp_path / "out", k, tmp_path), store)
        assert got.taken == (f"part.{k}",) and not got.gap and not got.restarted
        missing.append(got.missing)
    assert missing == [("part.02", "part.03", "part.04"), ("part.03", "part.04"), ("part.04",), ()]
    join(store, tmp_path / "joined.tar")
    assert (tmp_path / "joined.tar").read_bytes() == stream.read_bytes()


def test_a_cold_machine_is_said_and_nothing_joins_until_the_missing_parts_come_again(tmp_path):
    stream = _stream(tmp_path)
    split(stream, tmp_path / "out", 300)
    store = tmp_path / "store"
    receive(_call(tmp_path / "out", "01", tmp_path), store)
    receive(_call(tmp_path / "out", "02", tmp_path), store)
    cold = tmp_path / "fresh_store"  # the machine went back: its /tmp is empty when part 3 arrives
    got = receive(_call(tmp_path / "out", "03", tmp_path), cold)
    assert got.gap and got.missing == ("part.01", "part.02", "part.04")
    with pytest.raises(FileNotFoundError, match="3 of 4 parts missing"):
        join(cold, tmp_path / "joined.tar")
    assert not (tmp_path / "joined.tar").exists()
    for k in ("01", "02"):  # the repeated calls
        receive(_call(tmp_path / "out", k, tmp_path), cold)
    got = receive(_call(tmp_path / "out", "04", tmp_path), cold)
    assert got.missing == () and not got.gap
    join(cold, tmp_path / "joined.tar")
    assert (tmp_path / "joined.tar").read_bytes() == stream.read_bytes()


def test_a_damaged_part_is_refused_and_the_store_keeps_what_it_had(tmp_path):
    split(_stream(tmp_path), tmp_path / "out", 300)
    store = tmp_path / "store"
    receive(_call(tmp_path / "out", "01", tmp_path), store)
    call = _call(tmp_path / "out", "02", tmp_path)
    data = bytearray((call / "02" / "part.02").read_bytes())
    data[17] ^= 1  # one bit flipped in transit
    (call / "02" / "part.02").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"part\.02: sha256"):
        receive(call, store)
    assert sorted(p.name for p in store.iterdir()) == [MANIFEST, "part.01"]
    assert (call / "02" / "part.02").exists()


def test_another_bundle_empties_the_store(tmp_path):
    split(_stream(tmp_path, seed=0), tmp_path / "old", 300)
    new = _stream(tmp_path, n=500, seed=1)
    split(new, tmp_path / "new", 300)
    store = tmp_path / "store"
    receive(_call(tmp_path / "old", "01", tmp_path), store)
    receive(_call(tmp_path / "old", "02", tmp_path), store)
    got = receive(_call(tmp_path / "new", "01", tmp_path / "n"), store)
    assert got.restarted and got.missing == ("part.02",)
    receive(_call(tmp_path / "new", "02", tmp_path / "n"), store)
    join(store, tmp_path / "joined.tar")
    assert (tmp_path / "joined.tar").read_bytes() == new.read_bytes()


def test_join_checks_the_whole_stream(tmp_path):
    """Parts swapped in the store pass no per-part check at join, but the whole sha256 catches them."""
    split(_stream(tmp_path), tmp_path / "out", 300)
    store = tmp_path / "store"
    for k in ("01", "02", "03", "04"):
        receive(_call(tmp_path / "out", k, tmp_path), store)
    a, b = (store / "part.01").read_bytes(), (store / "part.02").read_bytes()
    (store / "part.01").write_bytes(b)
    (store / "part.02").write_bytes(a)
    with pytest.raises(ValueError, match="joined stream's sha256"):
        join(store, tmp_path / "joined.tar")
    assert not (tmp_path / "joined.tar").exists()
    assert not (tmp_path / "joined.tar.partial").exists()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (f"{'a' * 64}  part.02\n{'b' * 64}  part.01\n{'c' * 64}  bundle.tar\n", "in order"),
        (f"{'a' * 64}  part.01\n", "one line per part"),
        (f"{'a' * 64}  part.01\n{'a' * 64}  part.01\n{'c' * 64}  bundle.tar\n", "no name twice"),
        (f"abc  part.01\n{'c' * 64}  bundle.tar\n", "sha256"),
    ],
)
def test_bad_manifests_are_refused(text, match):
    with pytest.raises(ValueError, match=match):
        Manifest.parse(text)


def test_cli_exit_status_says_whether_to_install(tmp_path, capsys):
    split(_stream(tmp_path), tmp_path / "out", 600)
    store = str(tmp_path / "store")
    assert gpu_parts.main(["receive", str(_call(tmp_path / "out", "02", tmp_path)), store]) == MISSING
    assert "went cold" in capsys.readouterr().out
    assert gpu_parts.main(["join", store, str(tmp_path / "j.tar")]) == 2
    assert gpu_parts.main(["receive", str(_call(tmp_path / "out", "01", tmp_path)), store]) == 0
    assert (
        gpu_parts.main(["receive", str(tmp_path / "nothing_carried"), store]) == 0
    )  # a later call: complete
    assert gpu_parts.main(["receive", str(tmp_path / "nothing_carried"), str(tmp_path / "cold")]) == 2
