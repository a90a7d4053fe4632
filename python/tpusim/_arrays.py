"""NumPy dtype conventions at the boundary with the native module.

Narrow floats cross as bits (uint16 for bfloat16/float16, uint8 for float8); here
they are viewed back as ml_dtypes types when ml_dtypes is installed. Views never copy.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, List, Optional, Tuple

import numpy as np

_ml_dtypes: Optional[ModuleType]
try:  # optional: without it bf16/f8 results stay as their bits
    import ml_dtypes as _found

    _ml_dtypes = _found
except ImportError:  # tests cover this by setting _ml_dtypes to None
    _ml_dtypes = None

# Logical dtype name -> the unsigned dtype carrying its bits.
_BITS = {
    "bfloat16": np.uint16,
    "float16": np.uint16,
    "float8_e4m3fn": np.uint8,
    "float8_e5m2": np.uint8,
}


def ml_dtypes() -> Optional[ModuleType]:
    """The ml_dtypes module, or None when it is not installed."""
    return _ml_dtypes


def to_native(value: Any) -> Tuple[np.ndarray, str]:
    """A C-contiguous array (bits for narrow floats) and its logical dtype name."""
    arr = np.asarray(value, order="C")
    name = arr.dtype.name
    bits = _BITS.get(name)
    if bits is not None:
        arr = arr.view(bits)
    return arr, name


def from_native(arr: np.ndarray, name: str) -> np.ndarray:
    """Views a result as its logical dtype where NumPy (or ml_dtypes) has it."""
    if name == "float16":
        return arr.view(np.float16)
    if name in _BITS:
        mod = ml_dtypes()
        if mod is not None:
            return arr.view(getattr(mod, name))
    return arr


def flatten(tree: Any) -> List[Any]:
    """The leaves of a pytree of arrays in JAX's order: ``jax.tree_util.tree_leaves``
    when jax is importable (so registered pytree nodes work); otherwise dicts by
    sorted key, then tuples and lists in order, recursively (JAX's order for these)."""
    try:
        import jax
    except ImportError:
        return _plain_leaves(tree)
    leaves: List[Any] = jax.tree_util.tree_leaves(tree)
    return leaves


def _plain_leaves(tree: Any) -> List[Any]:
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _plain_leaves(tree[key])]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _plain_leaves(item)]
    if tree is None:
        return []
    return [tree]


def restructure(x: Any, outputs: List[np.ndarray]) -> Any:
    """``outputs`` in the output structure of ``x`` when ``x`` is a JAX object that
    knows it (``out_tree``, with as many leaves) and that structure is a container
    (a tuple, list or dict of arrays); the flat list otherwise, so a one-array
    program still gives a one-element list, as it always has."""
    out_tree = getattr(x, "out_tree", None)
    if out_tree is None or getattr(out_tree, "num_leaves", None) != len(outputs):
        return outputs
    if getattr(out_tree, "num_nodes", 1) <= 1:
        return outputs
    try:
        import jax
    except ImportError:
        return outputs
    return jax.tree_util.tree_unflatten(out_tree, outputs)
