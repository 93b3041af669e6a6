"""The GPU check's packing (``scripts/gpu_pack.py``, issue 46): every package the GPU machine lacks travels, and the
calls fit the device tool's limit. The 2026-11-30 GPU run lost a call to ``import transformers`` failing there:
huggingface_hub 2.x requires ``httpx2``, which neither the image nor the pack held."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_pack", ROOT / "scripts" / "gpu_pack.py")
gpu_pack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_pack)


def missing(names: tuple[str, ...], image: frozenset[str]) -> set[str]:
    """Requirements of ``names`` (installed here) that neither travel nor are in ``image``."""
    carried = {gpu_pack.normalized(n) for n in names} | image
    return {d for n in names for d in gpu_pack.requirements(n) if gpu_pack.normalized(d) not in carried}


def test_the_pack_carries_every_requirement_the_image_lacks() -> None:
    roots = ("transformers", *gpu_pack.WHEELS)
    assert missing(gpu_pack.wheel_names(roots), gpu_pack.IMAGE) == set()
    # the control: with an image that lacks numpy and packaging, they are found missing from the roots alone and
    # carried by the closure
    image = gpu_pack.IMAGE - {"numpy", "packaging"}
    assert {"numpy", "packaging"} <= {gpu_pack.normalized(d) for d in missing(roots, image)}
    assert missing(gpu_pack.wheel_names(roots, image), image) == set()


def test_requirement_markers_are_read_for_the_gpu_machine() -> None:
    names = {gpu_pack.normalized(d) for d in gpu_pack.requirements("huggingface_hub")}
    assert "tomli" not in names  # python_version < "3.11"
    assert "hf-xet" in names  # platform_machine == "x86_64"


def test_calls_are_packed_in_order_within_the_room() -> None:
    calls = gpu_pack.plan_calls([("a", 6), ("b", 5), ("c", 4), ("d", 1)], free=10)
    assert calls == [[("a", 6)], [("b", 5), ("c", 4), ("d", 1)]]
    with pytest.raises(SystemExit, match="exceeds a call's free room"):
        gpu_pack.plan_calls([("big", 11)], free=10)
