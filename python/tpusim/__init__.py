"""tpusim: a TPU system simulator for the HLO programs JAX and XLA compile.

    import jax, jax.numpy as jnp, tpusim
    lowered = jax.jit(lambda a, b: jnp.tanh(a @ b)).lower(jnp.ones((512, 512)), jnp.ones((512, 512)))
    report = tpusim.analyze(lowered, chip="v5e")
    print(report.step_time_s, report.mfu)
    tpusim.trace(lowered, chip="v5e", logdir="/tmp/tpusim")  # Perfetto, HTML, xprof views

A sharded program is priced on a pod: ``tpusim.analyze(x, topology="4x4")``.

``x`` in every function is HLO text, a path to an HLO file, or a JAX ``Lowered``
(``jax.jit(f).lower(...)``) or ``Compiled`` object. ``analyze`` also takes a
function and abstract arguments, lowered for TPU on any machine:
``tpusim.analyze(step, *shape_dtype_structs, mesh=abstract_mesh, chip="v5e", topology="16x16")``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _arrays, _tpusim
from ._report import Report
from ._source import hlo_text, is_function, jax_output_sharding, lower_for_tpu
from ._tpusim import (
    ArgumentError,
    ChipError,
    InternalError,
    LimitError,
    ParseError,
    TopologyError,
    TpusimError,
    UnsupportedError,
    VerifyError,
    __version__,
)

__all__ = [
    "analyze",
    "run",
    "trace",
    "profile",
    "chips",
    "Report",
    "TpusimError",
    "ParseError",
    "VerifyError",
    "ChipError",
    "ArgumentError",
    "TopologyError",
    "UnsupportedError",
    "LimitError",
    "InternalError",
    "__version__",
]

# Keyword options of `analyze` and `trace` besides `chip` and `topology`.
_OPTIONS = frozenset(
    {"chip_file", "slices", "network", "device_order", "as_given", "collective_matmul", "propagation"}
)


def _native_options(what: str, chip: str, topology: Optional[str], options: Dict[str, Any]) -> Dict[str, Any]:
    """The keyword arguments of the native call for `analyze`/`trace` options."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TypeError(f"{what}() got unknown options {unknown}; known: {sorted(_OPTIONS)}")
    chip_file = options.get("chip_file")
    device_order = options.get("device_order")
    network = options.get("network", "analytic")
    if not isinstance(network, str):
        raise TypeError(f"network must be 'analytic' or 'sim', not {type(network).__name__}")
    propagation = _propagation(options.get("propagation"))
    slices = options.get("slices", 1)
    if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
        raise ArgumentError(f"slices must be a positive int, got {slices!r}")
    return {
        # A chip file wins over the builtin id, as `--chip-file` does in the CLI.
        "chip_id": None if chip_file is not None else chip,
        "chip_file": None if chip_file is None else os.fspath(chip_file),
        "topology": topology,
        # The native count is 32-bit: a larger one is passed as its largest
        # value, which the pod's own limit refuses with the same message.
        "slices": min(slices, 2**32 - 1),
        "network": network,
        "device_order": None if device_order is None else os.fspath(device_order),
        # True: price the module untouched (no TPU compiler passes), as `--as-given`.
        "as_given": bool(options.get("as_given", False)),
        # True: all-gather + dot pairs run as collective matmuls, as `--collective-matmul`.
        "collective_matmul": bool(options.get("collective_matmul", False)),
        "propagation": propagation,
    }


def _propagation(value: Any) -> Optional[str]:
    """A ``propagation=`` keyword: None (the default) or the name of one."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"propagation must be 'factors' or 'forward', not {type(value).__name__}")
    return value


def analyze(
    x: Any,
    *args: Any,
    chip: str = "v5e",
    topology: Optional[str] = None,
    mesh: Any = None,
    **options: Any,
) -> Report:
    """Predicts how one execution of the program runs on ``chip``.

    ``x`` is HLO text, a path, a JAX ``Lowered``/``Compiled`` object (including
    ``jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))``), or a Python
    function: ``analyze(f, *args, mesh=..., chip=..., topology=...)`` lowers
    ``f`` for TPU itself (``jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))``);
    ``args`` may be ``jax.ShapeDtypeStruct``s sharded on a
    ``jax.sharding.AbstractMesh``, and ``mesh`` is made the current mesh while
    tracing, so no TPU and no fake devices are needed.

    ``topology`` (chips per axis, e.g. ``"4x4x4"``) prices the program on a pod
    slice; a sharded program gets a pod without it too (its devices spread over
    the chip's torus), exactly as ``tpusim analyze`` does. Options: ``chip_file``
    (a chip described in TOML, used instead of ``chip``), ``slices`` (slices
    joined over DCN), ``network`` (``"analytic"`` formulas or ``"sim"``, a
    simulation of every link), ``device_order`` (a file placing device ids on the
    torus), ``as_given`` (price the module untouched instead of the program
    tpusim's TPU compiler passes make of it), ``collective_matmul`` (decompose
    each all-gather read by a dot into overlapping chunks, as XLA:TPU's
    ``--xla_tpu_decompose_all_gather_einsum`` does), ``propagation`` (how tpusim's
    partitioner gives unannotated values of a sharded program their sharding:
    ``"factors"``, the default, along each op's factors as Shardy does; or
    ``"forward"``, tpusim's earlier walk from operands to results, as
    ``--propagation``). Pods that cannot be built raise :class:`TopologyError`.

    ``mesh`` (a ``jax.sharding.Mesh`` or ``AbstractMesh``) also says which mesh the
    program's device ids number, so that its devices are placed on the slice as
    ``jax.make_mesh`` lays that mesh on a TPU (as ``--mesh`` does); it may be given
    with an already lowered or compiled program too. Without it, a program tpusim
    partitions gets the mesh read from its shardings.
    """
    native = _native_options("analyze", chip, topology, options)
    text, name = hlo_text(_program(x, args, mesh))
    json_text = _tpusim.analyze_json(text, name, mesh=_mesh_shape(mesh), **native)
    return Report(json_text, json.loads(_tpusim.chip_json(native["chip_id"], native["chip_file"])))


def _program(x: Any, args: Tuple[Any, ...], mesh: Any) -> Any:
    """What ``analyze`` reads: ``x`` itself, or a Python function lowered for TPU on ``args``."""
    if is_function(x):
        return lower_for_tpu(x, args, mesh)
    if args:
        raise ArgumentError(
            f"arguments after the program are for a Python function to lower; "
            f"got a {type(x).__name__} (give chip= and topology= by keyword)"
        )
    return x


def _mesh_shape(mesh: Any) -> Optional[List[int]]:
    """The axis sizes of a JAX ``Mesh``/``AbstractMesh`` (major first), or None."""
    if mesh is None:
        return None
    sizes = getattr(mesh, "axis_sizes", None)
    if sizes is None:
        raise ArgumentError(
            f"mesh= takes a jax.sharding.Mesh or AbstractMesh, not {type(mesh).__name__}"
        )
    return [int(n) for n in sizes]


def trace(
    x: Any,
    chip: str = "v5e",
    *,
    logdir: Union[str, "os.PathLike[str]"],
    topology: Optional[str] = None,
    mesh: Any = None,
    force: bool = False,
    timestamp: bool = False,
    **options: Any,
) -> Dict[str, str]:
    """Writes the profiler views of one simulated run into ``logdir``, as ``tpusim trace``.

    Returns the paths written: ``"trace"`` (``trace.json.gz``, for
    ui.perfetto.dev), ``"report"`` (``report.html``) and ``"xplane"`` (the
    ``.xplane.pb`` that ``xprof --logdir LOGDIR`` opens). ``topology``, ``mesh``
    (the mesh the device ids number) and the options are those of
    :func:`analyze`. Files already in ``logdir`` are
    replaced only with ``force=True``; ``timestamp=True`` stamps the XSpace
    with the wall-clock time (else every run writes the same bytes).
    """
    native = _native_options("trace", chip, topology, options)
    text, name = hlo_text(x)
    trace_path, report_path, xplane_path = _tpusim.trace_views(
        text,
        name,
        os.fspath(logdir),
        force=force,
        timestamp=timestamp,
        mesh=_mesh_shape(mesh),
        **native,
    )
    return {"trace": trace_path, "report": report_path, "xplane": xplane_path}


def profile(
    path: Union[str, "os.PathLike[str]"], hlo: Any = None, chip: Optional[str] = None
) -> Dict[str, Any]:
    """Summarizes a real ``jax.profiler`` capture per HLO op, as ``tpusim profile --json``.

    ``path`` is a log dir, one run folder or one ``.xplane.pb``. With ``hlo`` (the
    profiled program: HLO text, a path or a JAX object) and ``chip``, each op the
    program has also carries ``predicted_avg_s``, tpusim's time for one execution.
    """
    if (hlo is None) != (chip is None):
        raise ArgumentError("give both hlo= and chip= to predict each op")
    source = None if hlo is None else hlo_text(hlo)
    summary: Dict[str, Any] = json.loads(_tpusim.profile_json(os.fspath(path), source, chip))
    return summary


def run(
    x: Any,
    *arrays: Any,
    max_memory: Union[int, str, None] = None,
    output_sharding: Any = None,
    max_steps: Optional[int] = None,
    timeout: Optional[float] = None,
    propagation: Optional[str] = None,
) -> Any:
    """Executes the program on ``arrays`` with XLA's semantics; returns its results.

    Arguments are NumPy arrays (or anything ``np.asarray`` takes, such as JAX
    arrays) whose dtype and shape match the program's parameters, or pytrees of
    them (a params dict, nested tuples and lists), flattened in JAX's leaf order
    (``jax.tree_util`` when jax is importable, else sorted dict keys, then
    sequence order, as JAX does). bfloat16 and
    float8 values are ml_dtypes arrays when ml_dtypes is installed, else their
    bits as uint16 / uint8 arrays. Results of a tuple-shaped program are flattened into a list,
    except for a JAX ``Lowered``/``Compiled`` object, whose results come back in its
    output structure (``out_tree``: a tuple, list or dict of arrays), as calling the
    jitted function returns them; a one-array program gives a one-element list.

    A sharded program runs on as many simulated devices as it declares, on and
    returning GLOBAL arrays, as ``jax.jit`` takes and returns them. When a
    partitioned program's outputs carry no sharding, ``output_sharding`` gives it:
    HLO sharding text such as ``"{devices=[2,4]<=[8]}"``, or the unpartitioned
    program (text, path or ``jax.jit(f).lower(...)``); for a JAX ``Compiled``
    object it defaults to JAX's own ``output_shardings``. ``max_memory`` (bytes, or
    ``"8G"``) refuses programs whose estimated memory exceeds it (default: 75% of
    physical memory).

    ``max_steps`` (instructions evaluated, summed over all devices) and ``timeout``
    (seconds) stop a runaway program with :class:`LimitError`, whose message names
    the ``while`` loop being executed. Ctrl-C stops the run and raises
    ``KeyboardInterrupt``. ``propagation`` is that of :func:`analyze`, for an
    unpartitioned sharded program.
    """
    text, name = hlo_text(x)
    natives = [_arrays.to_native(a) for a in _arrays.flatten(arrays)]
    results = _tpusim.run(
        text,
        name,
        [a for a, _ in natives],
        [n for _, n in natives],
        max_memory=max_memory,
        output_sharding=_output_sharding(x, output_sharding),
        max_steps=max_steps,
        timeout=timeout,
        propagation=_propagation(propagation),
    )
    outputs = [_arrays.from_native(arr, dtype) for arr, dtype in results]
    return _arrays.restructure(x, outputs)


def _output_sharding(x: Any, value: Any) -> Union[str, Tuple[str, str], None]:
    if value is None:
        return jax_output_sharding(x)
    if isinstance(value, str) and value.lstrip().startswith("{"):
        return value
    return hlo_text(value)


def chips() -> List[Dict[str, Any]]:
    """The hardware database: one dict per chip, as ``tpusim chips --json`` prints."""
    chips_list: List[Dict[str, Any]] = json.loads(_tpusim.chips_json())
    return chips_list
