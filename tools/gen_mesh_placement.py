#!/usr/bin/env python3
"""Writes crates/pod/testdata/mesh_placement.json: where JAX puts each device of a
logical mesh on a TPU slice, with JAX itself as the oracle.

On a TPU, `jax.make_mesh` and `jax.experimental.mesh_utils.create_device_mesh`
(which MaxText calls) lay the mesh's axes on the slice's physical axes with
`_create_device_mesh_for_nd_torus`: the last (most network-intensive) mesh axis
first, each onto the largest set of still-free physical axes whose sizes multiply to
its size. tpusim does the same when a sharded program names no device order
(crates/pod/src/placement.rs); this file is the differential test's expectation.

Each case: the slice's physical shape (x, y, z), the mesh shape, and either the
physical (x, y, z) of every logical device id in row-major mesh order, or
`null` where JAX refuses the mesh (it would have to split a physical axis);
`split_coords` is the same with `allow_split_physical_axes=True`, which
`jax.make_mesh` passes on v5e.

Run: python3 tools/gen_mesh_placement.py   (needs jax; not run in CI)
"""
import json
import pathlib

import numpy as np
from jax._src import mesh_utils

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/pod/testdata/mesh_placement.json"

# (physical x, y, z) and mesh shapes: the fidelity bench's slices (MaxText's
# GPT-3 configurations on v5p and its v5e/v4 runs), 2D slices as JAX sees them
# (z = 1), size-1 mesh axes, and meshes JAX refuses.
CASES = [
    ((8, 8, 8), (1, 64, 8)),
    ((8, 8, 16), (8, 16, 8)),
    ((8, 12, 16), (12, 16, 8)),
    ((8, 16, 48), (16, 48, 8)),
    ((16, 16, 24), (16, 48, 8)),
    ((4, 4, 4), (4, 16)),
    ((4, 4, 4), (2, 32)),
    ((4, 4, 8), (8, 16)),
    ((4, 4, 8), (2, 8, 8)),
    ((16, 16, 1), (1, 256, 1)),
    ((16, 16, 1), (16, 16)),
    ((16, 16, 1), (256,)),
    ((8, 16, 1), (4, 32)),
    ((8, 16, 1), (16, 8)),
    ((4, 8, 1), (2, 16)),
    ((2, 4, 1), (8,)),
    ((4, 4, 16), (4, 4, 16)),
    ((4, 4, 16), (16, 16)),
    ((4, 8, 8), (2, 2, 64)),
    # Meshes only a split lays (jax.make_mesh on v5e splits physical axes).
    ((16, 16, 1), (4, 64)),
    ((16, 16, 1), (2, 128)),
    ((16, 16, 1), (8, 32)),
    ((16, 16, 1), (32, 8)),
    ((16, 16, 1), (2, 8, 16)),
    ((16, 16, 1), (4, 4, 16)),
    ((16, 16, 1), (2, 2, 64)),
    ((8, 16, 1), (8, 4, 4)),
    ((2, 4, 1), (2, 2, 2)),
    ((4, 4, 1), (8, 2)),
    ((16, 16, 24), (12, 32, 16)),
]


def placement(physical, mesh, split=False):
    ids = np.arange(int(np.prod(physical))).reshape(physical)
    try:
        laid, _ = mesh_utils._create_device_mesh_for_nd_torus(
            ids, mesh, allow_split_physical_axes=split)
    except (NotImplementedError, ValueError):
        return None
    return [list(map(int, np.unravel_index(int(d), physical))) for d in laid.reshape(-1)]


def main():
    cases = [
        {"physical": list(p), "mesh": list(m), "coords": placement(p, m),
         "split_coords": placement(p, m, split=True)}
        for p, m in CASES
    ]
    OUT.write_text(json.dumps({"source": "jax._src.mesh_utils._create_device_mesh_for_nd_torus, "
                                         "jax " + __import__("jax").__version__,
                               "cases": cases}, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({len(cases)} cases, "
          f"{sum(c['coords'] is None for c in cases)} refused by JAX)")


if __name__ == "__main__":
    main()
