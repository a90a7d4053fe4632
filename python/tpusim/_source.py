"""Turning what the user hands to tpusim (HLO text, a path, a JAX object) into HLO text."""

from __future__ import annotations

import gzip
import inspect
import os
from typing import Any, List, Optional, Tuple

from ._tpusim import ArgumentError, ParseError


def hlo_text(x: Any) -> Tuple[str, str]:
    """Returns ``(text, name)``: the HLO text of ``x`` and the name diagnostics show.

    ``x`` is HLO text, a path to a file of HLO text, or a JAX ``Lowered`` /
    ``Compiled`` object (found by duck typing, so importing tpusim never imports jax).
    """
    if isinstance(x, os.PathLike):
        return _read(os.fspath(x))
    if isinstance(x, bytes):
        return _decode(x, "<bytes>"), "<bytes>"
    if isinstance(x, str):
        # HLO text starts with its module header or spans lines; a path does neither.
        if "\n" in x or x.lstrip().startswith(("HloModule", "module", "func.func")):
            return _checked(x, "<string>"), "<string>"
        return _read(x)
    as_text = getattr(x, "as_text", None)
    if callable(as_text):
        return _jax_text(x, as_text), f"<{type(x).__name__}>"
    raise ArgumentError(
        f"cannot take HLO from a {type(x).__name__}: give HLO text, a path, "
        "or a JAX Lowered/Compiled object (jax.jit(f).lower(...))"
    )


def is_function(x: Any) -> bool:
    """True for a Python callable to trace (a function or a ``jax.jit`` wrapper), as
    opposed to HLO text, a path, or a JAX ``Lowered``/``Compiled`` object."""
    return callable(x) and not hasattr(x, "as_text") and not isinstance(x, (str, bytes, os.PathLike))


def lower_for_tpu(f: Any, args: Tuple[Any, ...], mesh: Any = None) -> Any:
    """``jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))``: the pre-partition
    program of ``f`` for a TPU mesh, lowered on any machine (no TPU, no fake devices).

    ``args`` are arrays or ``jax.ShapeDtypeStruct``s, whose ``sharding`` may be a
    ``NamedSharding`` on a ``jax.sharding.AbstractMesh``. ``mesh`` (a ``Mesh`` or
    ``AbstractMesh``) is made the current abstract mesh while tracing, so bare
    ``PartitionSpec``s (in ``ShapeDtypeStruct(..., sharding=P(...))`` or
    ``with_sharding_constraint``) resolve against it.
    """
    import contextlib

    import jax  # only reached for a Python function, so jax is installed

    jitted = f if hasattr(f, "trace") else jax.jit(f)
    context: Any = contextlib.nullcontext()
    if mesh is not None:
        # A concrete Mesh lowers for TPU through its device-free AbstractMesh.
        context = jax.sharding.use_abstract_mesh(getattr(mesh, "abstract_mesh", mesh))
    with context:
        return jitted.trace(*args).lower(lowering_platforms=("tpu",))


def _jax_text(x: Any, as_text: Any) -> str:
    # Lowered.as_text takes a dialect (the default is StableHLO); Compiled.as_text
    # takes none and returns the optimized HLO.
    try:
        takes_dialect = "dialect" in inspect.signature(as_text).parameters
    except (TypeError, ValueError):
        takes_dialect = False
    text = as_text(dialect="hlo") if takes_dialect else as_text()
    if not isinstance(text, str):
        raise ArgumentError(f"{type(x).__name__}.as_text() returned no HLO text")
    return _checked(text, f"<{type(x).__name__}>")


def _read(path: str) -> Tuple[str, str]:
    with open(path, "rb") as f:
        data = f.read()
    return _decode(data, path), path


# The two bytes every gzip stream starts with (RFC 1952): `.hlo.gz` files are
# found by content, as the CLI finds them.
_GZIP_MAGIC = b"\x1f\x8b"


def _decode(data: bytes, name: str) -> str:
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise ParseError(f"{name}: corrupt gzip data ({e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{name}: not valid UTF-8 text (invalid byte at offset {e.start})") from None
    return _checked(text, name)


def mlir_dialect(text: str) -> Optional[str]:
    """The MLIR dialect of ``text`` when it is an MLIR module (what ``Lowered.as_text()``
    prints by default) rather than HLO text; ``None`` for anything else."""
    for line in text.splitlines():
        first = line.strip()
        if first and not first.startswith(("//", "#")):
            break
    else:
        return None
    if not first.startswith(("module @", "module {", "module attributes", "func.func")):
        return None
    if "stablehlo." in text:
        return "StableHLO (MLIR)"
    if "mhlo." in text:
        return "MHLO (MLIR)"
    return "MLIR"


def _checked(text: str, name: str) -> str:
    """``text`` itself, or a ParseError naming its dialect and the one-line fix when it
    is MLIR: tpusim reads HLO text, which JAX prints on request."""
    dialect = mlir_dialect(text)
    if dialect is None:
        return text
    raise ParseError(
        f"{name}: this is {dialect} text, not HLO text; tpusim reads HLO. Print the program "
        'as HLO: `lowered.as_text(dialect="hlo")` or '
        '`jax.jit(f).lower(...).compiler_ir("hlo").as_hlo_text()`'
    )


def jax_output_sharding(x: Any) -> Optional[str]:
    """The HLO sharding of a JAX ``Compiled`` object's outputs when they span
    several devices: a partitioned module's root often carries none, and JAX
    knows them (``Compiled.output_shardings``). ``None`` for anything else.
    """
    out_info = getattr(x, "out_info", None)
    if out_info is None or not hasattr(x, "output_shardings"):
        return None
    try:
        import jax  # only reached for JAX objects, so jax is installed

        leaves: List[Any] = jax.tree_util.tree_leaves(out_info)
        shardings = [leaf.sharding for leaf in leaves]
        if not shardings or all(len(s.device_set) <= 1 for s in shardings):
            return None
        # `_to_xla_hlo_sharding` is how JAX itself writes shardings into HLO.
        texts = [str(s._to_xla_hlo_sharding(len(leaf.shape))) for s, leaf in zip(shardings, leaves)]
    except Exception:  # a JAX without these internals: the module's own shardings rule
        return None
    return texts[0] if len(texts) == 1 else "{" + ", ".join(texts) + "}"
