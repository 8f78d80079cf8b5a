"""Where benchmark data lives: locate, unpack or download it, never copy it into the repository.

ALFWorld's game files are not on PyPI.  Resolution order for the folder that contains ``json_2.1.1``:

1. an explicit ``path`` (config value),
2. ``$ALFWORLD_DATA`` (the variable the official ``alfworld-download`` uses),
3. a tarball (explicit, or ``$HIERARL_SHARED/data/alfworld/alfworld_json_2.1.1.tar.gz``) unpacked once into the
   cache (``$HIERARL_CACHE``, default ``~/.cache/hierarl``).

Users with internet run ``download_alfworld(dest)`` (the official downloader) instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ALFWORLD_TARBALL_NAME = "alfworld_json_2.1.1.tar.gz"
ALFWORLD_JSON_DIR = "json_2.1.1"
_REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """``$HIERARL_SHARED``, else the ``shared`` folder beside the repository root (tests and local runs)."""
    return Path(os.environ.get("HIERARL_SHARED", _REPO_ROOT.parent / "shared")).expanduser()


def cache_dir() -> Path:
    """``$HIERARL_CACHE``, else ``$XDG_CACHE_HOME/hierarl`` (``~/.cache/hierarl``)."""
    if "HIERARL_CACHE" in os.environ:
        return Path(os.environ["HIERARL_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "hierarl"


def shared_alfworld_tarball() -> Path:
    return shared_dir() / "data" / "alfworld" / ALFWORLD_TARBALL_NAME


def unpack_alfworld(tarball: str | Path, dest: str | Path | None = None) -> Path:
    """Unpack the ALFWorld tarball once and return the folder holding ``json_2.1.1``.

    Idempotent and safe when several env workers start at once: each extracts into its own temporary folder and
    the first rename wins (``tarfile`` ``filter="data"`` refuses links and paths outside the target).
    """
    tarball = Path(tarball).expanduser()
    target = Path(dest).expanduser() if dest is not None else cache_dir() / "alfworld"
    if (target / ALFWORLD_JSON_DIR).is_dir():
        return target
    if not tarball.is_file():
        raise FileNotFoundError(f"ALFWorld tarball not found: {tarball}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".alfworld-unpack-") as tmp:
        with tarfile.open(tarball, "r:gz") as archive:
            archive.extractall(tmp, filter="data")
        found = next(Path(tmp).rglob(ALFWORLD_JSON_DIR), None)
        if found is None:
            raise FileNotFoundError(f"{tarball} has no {ALFWORLD_JSON_DIR}/ folder")
        try:
            found.parent.rename(target)
        except OSError:
            # Losing the race to another worker's finished unpack is fine; any other failure is not.
            if not (target / ALFWORLD_JSON_DIR).is_dir():
                raise
    return target


def alfworld_data_dir(path: str | Path | None = None, *, tarball: str | Path | None = None) -> Path:
    """The folder that contains ``json_2.1.1`` (see the module docstring for the resolution order)."""
    candidates: list[Path] = []
    if path is not None:
        candidates.append(Path(path).expanduser())
    if os.environ.get("ALFWORLD_DATA"):
        candidates.append(Path(os.environ["ALFWORLD_DATA"]).expanduser())
    for candidate in candidates:
        if (candidate / ALFWORLD_JSON_DIR).is_dir():
            return candidate
        if candidate.name == ALFWORLD_JSON_DIR and candidate.is_dir():
            return candidate.parent
    source = Path(tarball).expanduser() if tarball is not None else shared_alfworld_tarball()
    if source.is_file():
        return unpack_alfworld(source)
    raise FileNotFoundError(
        "ALFWorld game files not found. Looked in "
        + ", ".join(str(c) for c in candidates or ["(no path, ALFWORLD_DATA unset)"])
        + f" and for the tarball {source}. With internet: `hierarl download-alfworld DEST` (runs the official "
        "`alfworld-download`), then set ALFWORLD_DATA=DEST."
    )


def download_alfworld(dest: str | Path) -> Path:
    """Run the official ``alfworld-download --data-dir DEST`` (needs internet and ``hierarl[alfworld]``).

    Returns ``dest``; point ``ALFWORLD_DATA`` (or the env's ``data_dir``) at it afterwards.
    """
    dest = Path(dest).expanduser().resolve()
    dest.mkdir(parents=True, exist_ok=True)
    script = shutil.which("alfworld-download") or str(Path(sys.executable).parent / "alfworld-download")
    if not Path(script).exists():
        raise FileNotFoundError("`alfworld-download` not found: pip install 'hierarl[alfworld]'")
    done = subprocess.run(
        [script, "--data-dir", str(dest)],
        env={**os.environ, "ALFWORLD_DATA": str(dest)},
        stderr=subprocess.PIPE,
        text=True,
    )
    if done.returncode != 0:  # its traceback stays out of the way; its last line says why
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise OSError(f"alfworld-download failed (exit {done.returncode}): {last}")
    return dest
