"""Pack what the GPU machine lacks into device calls that each fit the device tool's 64 MiB (issue 46, item 5).

    python scripts/gpu_pack.py [--gguf PATH] [--out .gpu] [--no-transformers]

The device tool sends the working tree (tracked and untracked-not-ignored files) plus the ``carry`` paths, 64 MiB in
all per call, and the machine keeps its files between calls only while it stays warm (30 s after each call). The
checkout alone is over that (the results' jsonl files, the training data, three heads), so a GPU session first
slims it (``bash scripts/gpu_slim.sh on``: a temporary detached commit without ``docs/``, ``data/`` and the EAGLE-1
and HASS heads; ``off`` puts main back), then makes the calls this script plans:

* the model: SmolLM2-135M-Instruct's GGUF, xz-compressed, cut into parts;
* pure-Python (and abi3/cp312) wheels of the packages the machine lacks or has at another version;
* ``.gpu/PLAN.md``: per call, what it carries (``.gpu/call-N``) and its command (``bash scripts/gpu_check.sh stash``
  for all but the last, ``bash scripts/gpu_check.sh run`` for the last, which reassembles, checks the sha256,
  installs the wheels, runs the GPU tests and the bench). Make the calls one right after the other.

Sizes are measured here: the slim tree's bytes (``git ls-files`` minus the slimmed paths), each wheel, each part.
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 64 * 2**20
MARGIN = 2 * 2**20  # untracked files, metadata
#: Tracked paths a GPU check does not need (``scripts/gpu_slim.sh`` leaves them out of the tree that travels).
SLIM = ("docs", "data", "specdec/heads/smollm2-135m-instruct/eagle1", "specdec/heads/smollm2-135m-instruct/hass")
#: What the GPU image lacks or holds at another version (its package list: the device tool's KINDS.md), pinned to
#: this checkout's versions. Their requirements that the image lacks travel too (:func:`wheel_names`).
WHEELS = ("huggingface_hub", "pydantic", "pydantic_core", "gguf", "tokenizers", "annotated_types", "typing_inspection")
#: The distributions the GPU image holds (names; ``scripts/gpu_image.txt``, from KINDS.md).
IMAGE = frozenset(
    re.sub(r"[-_.]+", "-", line.strip()).lower()
    for line in (ROOT / "scripts" / "gpu_image.txt").read_text().splitlines()
    if line.strip() and line[0] != "#"
)
#: The GPU machine's interpreter, where requirement markers are evaluated.
TARGET_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux"}
TARGET_ENV |= {"platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(name: str) -> list[str]:
    """The distributions the installed ``name`` requires on the GPU machine (markers evaluated there, no extras)."""
    found = []
    try:
        lines = metadata.requires(name) or []
    except metadata.PackageNotFoundError:  # required there (Python 3.12) but not installed here: pins need it here
        raise SystemExit(f"{name} is needed on the GPU machine but not installed here: pip install {name}") from None
    for line in lines:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({**TARGET_ENV, "extra": ""}):
            found.append(req.name)
    return found


def wheel_names(roots: tuple[str, ...], image: frozenset[str] = IMAGE) -> tuple[str, ...]:
    """``roots`` and, transitively, every requirement of theirs the image lacks (huggingface_hub 2.x's ``httpx2``
    did: the 2026-11-30 GPU run stopped at ``import transformers``)."""
    names, queue = list(roots), list(roots)
    seen = {normalized(n) for n in roots}
    while queue:
        for dep in requirements(queue.pop()):
            key = normalized(dep)
            if key not in seen and key not in image:
                seen.add(key)
                names.append(dep)
                queue.append(dep)
    return tuple(names)


def slim_tree_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    names = [f.decode() for f in files if f]
    kept = [n for n in names if not any(n == s or n.startswith(s + "/") for s in SLIM)]
    return sum((ROOT / n).stat().st_size for n in kept if (ROOT / n).is_file())


def download_wheels(dest: Path, names: tuple[str, ...]) -> list[Path]:
    shutil.rmtree(dest, ignore_errors=True)  # only this plan's wheels: two versions of one stop the whole install
    dest.mkdir(parents=True)
    pins = [f"{n}=={metadata.version(n)}" for n in names]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version"]
    command += ["3.12", "--implementation", "cp", *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(dest)]
    subprocess.run(command + pins, check=True)
    return sorted(dest.glob("*.whl"))


def compressed_model(gguf: Path, out: Path) -> tuple[Path, str]:
    """``out/model.gguf.xz`` (made once) and the GGUF's sha256."""
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    xz = out / "model.gguf.xz"
    stamp = out / "model.sha256"
    if not (xz.is_file() and stamp.is_file() and stamp.read_text().split()[0] == digest):
        with gguf.open("rb") as src, lzma.open(xz, "wb", preset=6) as dst:
            shutil.copyfileobj(src, dst, 2**22)
        stamp.write_text(f"{digest}  model.gguf\n")
    return xz, digest


def plan_calls(pieces: list[tuple[str, int]], free: int) -> list[list[tuple[str, int]]]:
    """Pieces (name, bytes) packed in order into calls of at most ``free`` bytes each."""
    calls: list[list[tuple[str, int]]] = [[]]
    for name, size in pieces:
        if size > free:
            raise SystemExit(f"{name} ({size / 2**20:.1f} MiB) exceeds a call's free room ({free / 2**20:.1f} MiB)")
        if sum(s for _, s in calls[-1]) + size > free:
            calls.append([])
        calls[-1].append((name, size))
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="the target's GGUF (default: the installed SmolLM2)")
    parser.add_argument("--out", type=Path, default=ROOT / ".gpu")
    parser.add_argument("--no-transformers", action="store_true", help="trust the GPU image's transformers")
    args = parser.parse_args(argv)
    if args.gguf is None:
        from specdec.models import smollm2_gguf_path

        args.gguf = smollm2_gguf_path()
    out: Path = args.out
    shutil.rmtree(out / "calls", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    tree = slim_tree_bytes()
    free = LIMIT - tree - MARGIN
    print(f"slim tree {tree / 2**20:.1f} MiB: {free / 2**20:.1f} MiB free per call")
    names = wheel_names(WHEELS if args.no_transformers else ("transformers", *WHEELS))
    print("wheels:", " ".join(names))
    wheels = download_wheels(out / "wheels", names)
    xz, digest = compressed_model(args.gguf, out)
    part = free - 1
    pieces = [(f"wheels/{w.name}", w.stat().st_size) for w in wheels]
    data = xz.read_bytes()
    for i in range(0, len(data), part):
        name = f"model.gguf.xz.part-{i // part:02d}"
        (out / name).write_bytes(data[i : i + part])
        pieces.append((name, min(part, len(data) - i)))
    pieces.append(("model.sha256", (out / "model.sha256").stat().st_size))
    calls = plan_calls(sorted(pieces, key=lambda p: p[0].startswith("wheels")), free)  # model parts first
    lines = [f"# GPU check: {len(calls)} device calls, one right after the other (warm 30 s)", ""]
    lines += [f"GGUF sha256 {digest}; slim tree {tree / 2**20:.1f} MiB; `bash scripts/gpu_slim.sh on` first.", ""]
    for n, call in enumerate(calls):
        folder = out / "calls" / f"call-{n}"
        for name, _ in call:
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(out / name, target)
        verb = "run" if n == len(calls) - 1 else "stash"
        size = sum(s for _, s in call) / 2**20
        lines.append(f"{n + 1}. carry `.gpu/calls/call-{n}` ({size:.1f} MiB): `bash scripts/gpu_check.sh {verb} {n}`")
    (out / "PLAN.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
