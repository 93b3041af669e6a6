"""One-off: bring a capture folder written at commit 50974d6 to the format of the next commit.

That commit's `capture.json` lacked `target_dtype` and its shard files carried no settings in their metadata. This
checks that the folder's settings are those of SmolLM2 in fp32 with EAGLE-3's spec in bf16, rewrites `capture.json`,
and rewrites every shard file with the settings in its metadata (the tensors are unchanged; their widths are checked).

Usage: ``python migrate_capture.py runs/sd-captured``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specdec.models import load_smollm2
from specdec.train.captured import CAPTURE, _settings
from specdec.train.features import FeatureSpec, eagle3_layers


def main() -> None:
    folder = Path(sys.argv[1])
    model, _ = load_smollm2()
    new = _settings(model, FeatureSpec(final=True, layers=eagle3_layers(30)), torch.bfloat16)
    old = json.loads((folder / CAPTURE).read_text())
    if {k: v for k, v in new.items() if k != "target_dtype"} != old:
        raise SystemExit(f"{folder} was not captured with SmolLM2's EAGLE-3 spec: {old}")
    hidden = new["hidden_size"]
    files = sorted(folder.glob("shard-*.safetensors"))
    for file in files:
        tensors = load_file(str(file))
        if tensors["final"].shape[1] != hidden or tensors["fused"].shape[1] != 3 * hidden:
            raise SystemExit(f"{file} has unexpected widths")
        if (
            tensors["input_ids"].shape[0] != tensors["final"].shape[0]
            or int(tensors["lengths"].sum()) != tensors["input_ids"].shape[0]
        ):
            raise SystemExit(f"{file} has inconsistent lengths")
        tmp = file.with_name(file.name + ".tmp")
        save_file(tensors, str(tmp), metadata={"capture": json.dumps(new, sort_keys=True)})
        tmp.replace(file)
    tmp = folder / (CAPTURE + ".tmp")
    tmp.write_text(json.dumps(new, indent=1) + "\n")
    tmp.replace(folder / CAPTURE)
    print(f"{folder}: {len(files)} capture files rewritten with their settings; {CAPTURE} now {new}")


if __name__ == "__main__":
    main()
