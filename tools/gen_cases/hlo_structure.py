"""The structural summary of a partitioned HLO module that testdata/spmd_cases/*/structure.json holds.

Per-device ENTRY parameter and result shapes, and the multiset of collectives (kind, per-device
bytes, group size, count); the definitions are in testdata/spmd_cases/README.md. Needs only the
standard library and NumPy (no jax), so it also summarizes any module, e.g. tpusim's own output:

    python3 tools/gen_cases/hlo_structure.py FILE [NUM_DEVICES]

(NUM_DEVICES defaults to the module's num_partitions.)
"""
import json
import re
import sys

import numpy as np

DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2,
               "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
               "c128": 16, "token": 0}
LEAF = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")
INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def leaves(type_text):
    """Leaf array shapes of an HLO type, layouts dropped: 'f32[4,2]', 'bf16[]', ..."""
    return [f"{t}[{d}]" for t, d in LEAF.findall(type_text) if t in DTYPE_BYTES]


def nbytes(type_text):
    total = 0
    for t, d in LEAF.findall(type_text):
        if t in DTYPE_BYTES:
            total += DTYPE_BYTES[t] * int(np.prod([int(x) for x in d.split(",") if x]))
    return int(total)


def operand_names(args):
    depth, cur, out = 0, "", []
    for ch in args:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            if depth == 0:
                out.append(cur)
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [o.strip().split()[-1].lstrip("%") for o in out if o.strip()]


def attr(line, key):
    i = line.find(key + "=")
    if i < 0:
        return None
    j, depth = i + len(key) + 1, 0
    k = j
    while k < len(line):
        c = line[k]
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif c == "," and depth == 0:
            break
        k += 1
    return line[j:k]


def group_size(line, kind, num_devices):
    if kind == "collective-permute":
        pairs = attr(line, "source_target_pairs") or "{}"
        return len(re.findall(r"\{\d+,\d+\}", pairs))
    mesh_form = re.search(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\((?:[^()]|\([^()]*\))*\))? \{([^}]*)\}", line)
    if mesh_form:
        # XLA's mesh form: mesh['axis_0'=2,'axis_1'=4] {'axis_0'}: one group per value of the unnamed axes.
        sizes = {a: int(n) for a, n in re.findall(r"'([^']+)'=(\d+)", mesh_form.group(1))}
        size = 1
        for a, sub in re.findall(r"'([^']+)'(:\(\d+\)\d+)?", mesh_form.group(2)):
            size *= int(re.match(r":\(\d+\)(\d+)", sub).group(1)) if sub else sizes[a]
        return size
    g = attr(line, "replica_groups")
    if g is None or g.strip() in ("{}", "{{}}"):
        return num_devices
    iota = re.match(r"\[(\d+),(\d+)\]<=", g.strip())
    if iota:
        return int(iota.group(2))
    groups = re.findall(r"\{([\d,]+)\}", g)
    sizes = {len(x.split(",")) for x in groups}
    if len(sizes) != 1:
        raise ValueError(f"replica groups of unequal size: {g}")
    return sizes.pop()


def structure(hlo, num_devices):
    types, found = {}, []
    entry_sig = None
    for line in hlo.splitlines():
        if line.startswith("ENTRY"):
            entry_sig = line
        mt = INSTR.match(line)
        if not mt:
            continue
        name, ty, op, args = mt.groups()
        types[name] = ty
        kind = op[:-6] if op.endswith("-start") else op
        if kind in COLLECTIVES:
            found.append((kind, args, ty, line))
    counts = {}
    for kind, args, ty, line in found:
        if kind == "all-gather":
            b = nbytes(ty)
        else:
            ops = operand_names(args)
            b = sum(nbytes(types[o]) for o in ops) if kind != "collective-permute" else nbytes(types[ops[0]])
        key = (kind, b, group_size(line, kind, num_devices))
        counts[key] = counts.get(key, 0) + 1
    params_text, result_text = re.match(r"ENTRY\s+\S+\s*\((.*)\)\s*->\s*(.*)\{\s*$", entry_sig).groups()
    return {
        "parameters": leaves(params_text),
        "results": leaves(result_text),
        "collectives": [{"kind": k, "per_device_bytes": b, "group_size": g, "count": c}
                        for (k, b, g), c in sorted(counts.items())],
    }


def main():
    path = sys.argv[1]
    text = open(path).read()
    if len(sys.argv) > 2:
        n = int(sys.argv[2])
    else:
        m = re.search(r"num_partitions=(\d+)", text.split("\n", 1)[0])
        n = int(m.group(1)) if m else 1
    print(json.dumps({"num_devices": n, **structure(text, n)}, indent=1))


if __name__ == "__main__":
    main()
