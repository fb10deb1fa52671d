#!/usr/bin/env python3
"""Casts a model folder's floating-point tensors to another dtype (the long-prompt model is
trained in float32 and committed as bfloat16: half the bytes, the dtype hypic keeps in memory).

    python3 scripts/cast_model.py SRC DST [--dtype bfloat16]

Copies SRC's files to DST (DST may be SRC), rewrites model.safetensors with every floating-point
tensor cast (round to nearest even), sets config.json's "dtype" and, when there is a
training.json, records "stored_as" in it."""
import argparse
import json
import pathlib
import shutil

import torch
from safetensors.torch import load_file, save_file

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    args = ap.parse_args()
    src, dst = pathlib.Path(args.src), pathlib.Path(args.dst)
    if not (src / "model.safetensors").is_file():
        raise SystemExit(f"cast_model: {src / 'model.safetensors'} not found")
    dst.mkdir(parents=True, exist_ok=True)
    if src.resolve() != dst.resolve():
        for f in src.iterdir():
            if f.is_file() and f.name != "model.safetensors":
                shutil.copy2(f, dst / f.name)
    to = DTYPES[args.dtype]
    tensors = load_file(str(src / "model.safetensors"))
    was = sorted({str(t.dtype).replace("torch.", "") for t in tensors.values()})
    cast = {k: (t.to(to) if t.is_floating_point() else t).contiguous() for k, t in tensors.items()}
    save_file(cast, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((dst / "config.json").read_text())
    config["dtype"] = args.dtype
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    training = dst / "training.json"
    if training.is_file():
        info = json.loads(training.read_text())
        info["stored_as"] = f"{args.dtype} (cast by scripts/cast_model.py from {', '.join(was)})"
        training.write_text(json.dumps(info, indent=1) + "\n")
    print(f"cast_model: {len(cast)} tensors {', '.join(was)} -> {args.dtype} in {dst}")


if __name__ == "__main__":
    main()
