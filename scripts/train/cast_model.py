#!/usr/bin/env python3
"""Casts a model folder's floating-point tensors to another dtype (the long-prompt model is
trained in float32 and committed as bfloat16: half the bytes, the dtype hypic keeps in memory),
or averages several models of one architecture weight by weight and casts the mean.
Takes: seconds (needs torch and safetensors).

    python3 scripts/train/cast_model.py SRC DST [--dtype bfloat16]
    python3 scripts/train/cast_model.py SRC DST --average SRC2 [SRC3 ...] [--dtype bfloat16]

Copies SRC's files to DST (DST may be SRC), rewrites model.safetensors with every floating-point
tensor cast (round to nearest even), sets config.json's "dtype" and, when there is a
training.json, records "stored_as" in it. With --average, each floating-point tensor is the
mean of SRC's and the SRCn's, taken in float64 and then cast (a uniform "model soup" of runs
that continue one model); the configs must agree, and SRC's training.json gets the others'
records under "averaged_with" (a record, or the one it continues, that is already in SRC's
chain of "continues" is named by its place there, {"same_as": "continues.continues"})."""
import argparse
import json
import pathlib
import shutil

import torch
from safetensors.torch import load_file, save_file

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _against_chain(record, info):
    """`record` for info["averaged_with"]: a record that is in info's chain of "continues"
    (the stored_as of a cast aside) becomes {"same_as": "continues.continues"}, and one whose
    own "continues" is in it names that place, so the history is written once."""
    bare = lambda r: {k: v for k, v in r.items() if k != "stored_as"}
    chain, place, at = [], "continues", info.get("continues")
    while isinstance(at, dict):
        chain.append((place, bare(at)))
        place, at = place + ".continues", at.get("continues")
    for where, r in chain:
        if r == bare(record):
            return {"same_as": where}
    out = dict(record)
    if isinstance(out.get("continues"), dict):
        for where, r in chain:
            if r == bare(out["continues"]):
                out["continues"] = {"same_as": where}
                break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    ap.add_argument("--average", nargs="+", default=[], metavar="SRCn",
                    help="models to average with SRC, weight by weight")
    args = ap.parse_args()
    src, dst = pathlib.Path(args.src), pathlib.Path(args.dst)
    others = [pathlib.Path(o) for o in args.average]
    for s in [src] + others:
        if not (s / "model.safetensors").is_file():
            raise SystemExit(f"cast_model: {s / 'model.safetensors'} not found")
    config = json.loads((src / "config.json").read_text())
    for o in others:
        theirs = json.loads((o / "config.json").read_text())
        differ = sorted(k for k in set(config) | set(theirs)
                        if k != "dtype" and config.get(k) != theirs.get(k))
        if differ:
            raise SystemExit(f"cast_model: {o} cannot be averaged with {src}: config.json "
                             f"differs in {', '.join(differ)}")
    # Read every source before DST is written: DST may be one of them.
    tensors = load_file(str(src / "model.safetensors"))
    was = {str(t.dtype).replace("torch.", "") for t in tensors.values()}
    if others:
        total = {k: t.double() if t.is_floating_point() else t for k, t in tensors.items()}
        records = []
        for o in others:
            theirs = load_file(str(o / "model.safetensors"))
            if set(theirs) != set(total) or any(
                    theirs[k].shape != total[k].shape or
                    theirs[k].is_floating_point() != total[k].is_floating_point() for k in total):
                raise SystemExit(f"cast_model: {o} has other tensors than {src}")
            was |= {str(t.dtype).replace("torch.", "") for t in theirs.values()}
            for k, t in theirs.items():
                if t.is_floating_point():
                    total[k] += t.double()
                elif not torch.equal(t, total[k]):
                    raise SystemExit(f"cast_model: {o} differs from {src} in {k}, "
                                     f"which is not floating-point")
            record = o / "training.json"
            records.append(json.loads(record.read_text()) if record.is_file()
                           else {"training.json": f"none in {o.name}"})
        tensors = {k: t / (1 + len(others)) if t.is_floating_point() else t
                   for k, t in total.items()}
    was = sorted(was)
    dst.mkdir(parents=True, exist_ok=True)
    if src.resolve() != dst.resolve():
        for f in src.iterdir():
            if f.is_file() and f.name != "model.safetensors":
                shutil.copy2(f, dst / f.name)
    to = DTYPES[args.dtype]
    cast = {k: (t.to(to) if t.is_floating_point() else t).contiguous() for k, t in tensors.items()}
    save_file(cast, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config["dtype"] = args.dtype
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    what = f"the mean of {1 + len(others)} models' " if others else ""
    training = dst / "training.json"
    if training.is_file():
        info = json.loads(training.read_text())
        info["stored_as"] = (f"{args.dtype} ({what}weights cast by scripts/train/cast_model.py "
                             f"from {', '.join(was)})")
        if others:
            info["averaged_with"] = [_against_chain(r, info) for r in records]
        training.write_text(json.dumps(info, indent=1) + "\n")
    print(f"cast_model: {what}{len(cast)} tensors {', '.join(was)} -> {args.dtype} in {dst}")


if __name__ == "__main__":
    main()
