"""Kernel prototypes built beside the library for this folder's one-process comparisons: sources as a git revision
holds them (:func:`source_at`), compiled and loaded under the prototype's own op names (:func:`build`)."""

import shutil
import subprocess
import tempfile
from pathlib import Path

from torch.utils.cpp_extension import load

HERE = Path(__file__).parent


def source_at(rev: str, path: str) -> str:
    """The text of ``path`` (from the repository's root) at git revision ``rev``."""
    return subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout


def build(name: str, files: dict[str, str]) -> None:
    """Write ``files`` (name -> text) to a scratch folder and build and load their ``.cpp`` files as ``name``."""
    work = Path(tempfile.mkdtemp())
    for file, text in files.items():
        (work / file).write_text(text)
    load(
        name,
        [str(work / file) for file in files if file.endswith(".cpp")],
        extra_cflags=["-O3", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        build_directory=str(work),
        is_python_module=False,
    )
    shutil.rmtree(work, ignore_errors=True)
