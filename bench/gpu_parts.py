"""A bundle too large for one call to the lent GPU machine, carried in parts: split here, checked and kept there.

A call to that machine carries at most 64 MiB with the repository, and the machine keeps what a call left in
/tmp only while it stays warm (about 30 s between calls). So ``bench/gpu_bundle.sh`` splits one stream (a tar of
the payloads) into numbered parts, one folder per call (``.gpu/01``, ``.gpu/02``, ...), each with the manifest
``bundle.sha256`` (``sha256sum`` format: every part, then the whole stream). On the machine, ``receive`` checks
an arriving part against its manifest and moves it into the store; ``join`` rebuilds the stream only once every
part is there and its whole sha256 matches. A part of another bundle empties the store first; parts missing
before the one that arrived mean the machine went cold (or a call was skipped): the store says which calls to
repeat, and nothing is installed from an incomplete store. Standard library only: it runs on both machines.

    python bench/gpu_parts.py split STREAM OUTDIR --part-bytes N
    python3 bench/gpu_parts.py receive .gpu /tmp/gpu_parts     # exit 0 complete, 3 parts missing
    python3 bench/gpu_parts.py join /tmp/gpu_parts STREAM
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "bundle.sha256"
WHOLE = "bundle.tar"
"""The name the whole stream has in the manifest."""
MISSING = 3
"""``receive``'s exit status while parts are missing (0: complete; other non-zero: a bad part)."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def part_name(index: int, count: int) -> str:
    """``part.01`` of 12: zero-padded so that sorted names are the stream's order."""
    return f"part.{index:0{max(2, len(str(count)))}d}"


@dataclass(frozen=True)
class Manifest:
    """Each part's sha256 in stream order, and the whole stream's."""

    parts: tuple[tuple[str, str], ...]
    whole: str

    def text(self) -> str:
        return "".join(f"{digest}  {name}\n" for name, digest in (*self.parts, (WHOLE, self.whole)))

    @classmethod
    def parse(cls, text: str) -> Manifest:
        rows = [line.split(maxsplit=1) for line in text.splitlines() if line.strip()]
        if any(len(r) != 2 or len(r[0]) != 64 for r in rows):
            raise ValueError(f"{MANIFEST}: every line must be '<sha256>  <name>'")
        named = [(name.strip(), digest) for digest, name in rows]
        names = [n for n, _ in named]
        if names.count(WHOLE) != 1 or len(set(names)) != len(names):
            raise ValueError(f"{MANIFEST}: needs one line per part and one for {WHOLE}, no name twice")
        parts = tuple(r for r in named if r[0] != WHOLE)
        if [n for n, _ in parts] != [part_name(i, len(parts)) for i in range(1, len(parts) + 1)]:
            raise ValueError(f"{MANIFEST}: parts must be {part_name(1, len(parts))}.. in order")
        return cls(parts, dict(named)[WHOLE])

    def missing(self, store: Path) -> list[str]:
        return [name for name, _ in self.parts if not (store / name).exists()]


def split(stream: Path, outdir: Path, part_bytes: int) -> Manifest:
    """``stream`` cut into parts of ``part_bytes`` (the last one shorter), ``outdir/<k>/part.<k>`` with the
    manifest beside each; an empty stream or a part size under 1 is refused."""
    size = stream.stat().st_size
    if part_bytes < 1 or size == 0:
        raise ValueError(f"cannot split {size} bytes into parts of {part_bytes}")
    count = -(-size // part_bytes)
    parts = []
    with stream.open("rb") as f:
        for i in range(1, count + 1):
            name = part_name(i, count)
            folder = outdir / name.removeprefix("part.")
            folder.mkdir(parents=True, exist_ok=True)
            data = f.read(part_bytes)
            (folder / name).write_bytes(data)
            parts.append((name, hashlib.sha256(data).hexdigest()))
    manifest = Manifest(tuple(parts), sha256_file(stream))
    for name, _ in parts:
        (outdir / name.removeprefix("part.") / MANIFEST).write_text(manifest.text())
    return manifest


@dataclass(frozen=True)
class Received:
    """What ``receive`` did: the parts it took, the parts still missing, whether it emptied a store that held
    another bundle, and whether a part arrived while an earlier one was missing (the machine went cold)."""

    taken: tuple[str, ...]
    missing: tuple[str, ...]
    restarted: bool
    gap: bool


def receive(source: Path, store: Path) -> Received:
    """Moves every part under ``source/*/`` into ``store`` after checking its sha256 against its manifest. A bad
    part raises (and is left where it was); a manifest other than the store's empties the store first."""
    found = sorted(p for p in source.glob("*/part.*") if p.is_file())
    manifests = {(p.parent / MANIFEST).read_text() for p in found}
    if len(manifests) > 1:
        raise ValueError(f"parts of {len(manifests)} different bundles under {source}")
    store.mkdir(parents=True, exist_ok=True)
    kept = store / MANIFEST
    if not manifests:
        if not kept.exists():
            raise FileNotFoundError(
                f"no part under {source} and none kept in {store}: the machine went cold since the last part "
                "arrived (or none was carried yet); repeat every part's call"
            )
        return Received((), tuple(Manifest.parse(kept.read_text()).missing(store)), False, False)
    text = manifests.pop()
    manifest = Manifest.parse(text)
    digests = dict(manifest.parts)
    restarted = kept.exists() and kept.read_text() != text
    if restarted:
        shutil.rmtree(store)
        store.mkdir(parents=True)
    for part in found:
        if part.name not in digests:
            raise ValueError(f"{part}: not a part of this bundle ({MANIFEST} lists {len(digests)})")
        got = sha256_file(part)
        if got != digests[part.name]:
            raise ValueError(
                f"{part}: sha256 {got[:12]}.. differs from the manifest's {digests[part.name][:12]}.."
            )
    for part in found:
        shutil.move(str(part), store / part.name)
    kept.write_text(text)
    taken = tuple(p.name for p in found)
    missing = tuple(manifest.missing(store))
    return Received(taken, missing, restarted, gap=any(n < taken[0] for n in missing))


def join(store: Path, dest: Path) -> Manifest:
    """The stream rebuilt from a complete store and checked against the manifest's whole sha256; a missing part
    or a wrong whole raises and leaves no ``dest``."""
    manifest = Manifest.parse((store / MANIFEST).read_text())
    missing = manifest.missing(store)
    if missing:
        raise FileNotFoundError(f"{len(missing)} of {len(manifest.parts)} parts missing: {' '.join(missing)}")
    h = hashlib.sha256()
    tmp = dest.with_name(dest.name + ".partial")
    with tmp.open("wb") as out:
        for name, _ in manifest.parts:
            data = (store / name).read_bytes()
            h.update(data)
            out.write(data)
    if h.hexdigest() != manifest.whole:
        tmp.unlink()
        raise ValueError(f"the joined stream's sha256 {h.hexdigest()[:12]}.. is not the manifest's")
    tmp.replace(dest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split")
    s.add_argument("stream", type=Path)
    s.add_argument("outdir", type=Path)
    s.add_argument("--part-bytes", type=int, required=True)
    r = sub.add_parser("receive")
    r.add_argument("source", type=Path)
    r.add_argument("store", type=Path)
    j = sub.add_parser("join")
    j.add_argument("store", type=Path)
    j.add_argument("dest", type=Path)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "split":
            m = split(a.stream, a.outdir, a.part_bytes)
            print(
                f"gpu_parts: {len(m.parts)} parts of <= {a.part_bytes} bytes in {a.outdir}; sha256 {m.whole}"
            )
            return 0
        if a.cmd == "join":
            m = join(a.store, a.dest)
            print(f"gpu_parts: joined {len(m.parts)} parts into {a.dest}; sha256 checked")
            return 0
        got = receive(a.source, a.store)
    except (ValueError, FileNotFoundError) as e:
        print(f"gpu_parts: {e}", file=sys.stderr)
        return 2
    if got.restarted:
        print(f"gpu_parts: {a.store} held another bundle's parts; emptied, starting this bundle again")
    print(f"gpu_parts: took {' '.join(got.taken) or 'nothing'}; missing {' '.join(got.missing) or 'none'}")
    if got.gap:
        print(
            "gpu_parts: parts before the one that arrived are missing: the machine went cold (or a call was "
            "skipped); repeat the calls of the missing parts, nothing is installed until all are here"
        )
    return MISSING if got.missing else 0


if __name__ == "__main__":
    sys.exit(main())
