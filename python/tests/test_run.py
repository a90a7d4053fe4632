"""tpusim.run executes real JAX programs and matches JAX's own results."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import tpusim
from tpusim import _arrays

from programs import PROGRAMS, lowered, normal

# Float tolerance by dtype: XLA's CPU backend may reassociate sums and fuse ops.
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}


def check_same(ours: Any, theirs: object) -> None:
    ours = jax.tree_util.tree_leaves(ours)
    expected = [np.asarray(t) for t in jax.tree_util.tree_leaves(theirs)]
    assert len(ours) == len(expected)
    for got, want in zip(ours, expected):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert got.shape == want.shape
        tol = TOLERANCE.get(want.dtype.name)
        if tol is None:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(
                got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol
            )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_run_matches_jax(name: str) -> None:
    f, args = PROGRAMS[name]
    check_same(tpusim.run(lowered(name), *args), jax.jit(f)(*args))


def test_run_accepts_jax_arrays_and_compiled_objects() -> None:
    f, args = PROGRAMS["mlp_f32"]
    compiled = jax.jit(f).lower(*args).compile()
    jax_args = [jnp.asarray(a) for a in args]
    check_same(tpusim.run(compiled, *jax_args), jax.jit(f)(*args))


def test_bf16_without_ml_dtypes_travels_as_uint16_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    f, args = PROGRAMS["mlp_bf16"]
    monkeypatch.setattr(_arrays, "_ml_dtypes", None)
    bits = [a.view(np.uint16) for a in args]
    (out,) = tpusim.run(lowered("mlp_bf16"), *bits)
    assert out.dtype == np.uint16
    want = np.asarray(jax.jit(f)(*args)).astype(np.float32)
    np.testing.assert_allclose(out.view(ml_dtypes.bfloat16).astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_results_are_handed_over_without_a_copy() -> None:
    (out,) = tpusim.run(lowered("mlp_f32"), *PROGRAMS["mlp_f32"][1])
    # NumPy does not own the buffer: it is the interpreter's, moved into the array.
    assert not out.flags.owndata
    assert out.flags.writeable and out.flags.c_contiguous
    assert out.base is not None and not isinstance(out.base, np.ndarray)


def test_non_contiguous_inputs_are_accepted() -> None:
    x, w1, w2 = PROGRAMS["mlp_f32"][1]
    w1_f = np.asfortranarray(w1)
    assert not w1_f.flags.c_contiguous
    check_same(tpusim.run(lowered("mlp_f32"), x, w1_f, w2), jax.jit(PROGRAMS["mlp_f32"][0])(x, w1, w2))


def test_wrong_dtype_names_the_expected_one() -> None:
    x, w1, w2 = PROGRAMS["mlp_f32"][1]
    with pytest.raises(tpusim.ArgumentError, match="argument 1: .*float32 array; got float64"):
        tpusim.run(lowered("mlp_f32"), x, w1.astype(np.float64), w2)


def test_wrong_shape_names_both_shapes() -> None:
    x, w1, w2 = PROGRAMS["mlp_f32"][1]
    with pytest.raises(tpusim.ArgumentError, match=r"shape \[32, 64\]; got shape \[64, 32\]"):
        tpusim.run(lowered("mlp_f32"), x, w1.T.copy(), w2)


def test_wrong_argument_count() -> None:
    x, w1, _ = PROGRAMS["mlp_f32"][1]
    with pytest.raises(tpusim.ArgumentError, match="takes 3 arguments, 2 given"):
        tpusim.run(lowered("mlp_f32"), x, w1)


def test_unsupported_op_is_named() -> None:
    # A host callback runs Python inside the program: nothing a simulator can replay.
    def f(a: Any) -> Any:
        out = jax.ShapeDtypeStruct(a.shape, a.dtype)  # type: ignore[no-untyped-call]
        return jax.pure_callback(lambda v: v, out, a)

    x = normal(10)
    with pytest.raises(tpusim.UnsupportedError, match="xla_ffi_python_cpu_callback"):
        tpusim.run(jax.jit(f).lower(x), x)
