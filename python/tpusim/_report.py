"""`Report`: the result of `tpusim.analyze`, a view over the analysis JSON."""

from __future__ import annotations

import copy
import html
import importlib
import json
import math
from typing import Any, Dict, List, Optional, Tuple


class Report:
    """The performance analysis of one program on one chip.

    Every field of ``tpusim analyze --json`` is in :meth:`to_dict`; the properties
    below are the ones most often read. Times are per device; a sharded program's
    collectives are priced on the pod it was analyzed for.
    """

    def __init__(self, json_text: str, chip: Optional[Dict[str, Any]] = None) -> None:
        self._json = json_text
        self._data: Dict[str, Any] = json.loads(json_text)
        self._chip = chip

    @property
    def module(self) -> str:
        return str(self._data["module"])

    @property
    def chip(self) -> str:
        return str(self._data["chip"])

    @property
    def step_time_s(self) -> float:
        return float(self._data["step_time_s"])

    @property
    def mfu(self) -> float:
        return float(self._data["mfu"])

    @property
    def flops(self) -> float:
        return float(self._data["flops"])

    @property
    def bytes_accessed(self) -> float:
        return float(self._data["bytes_accessed"])

    @property
    def peak_memory_bytes(self) -> int:
        """Peak HBM in use on one device over the schedule."""
        return int(self._data["peak_memory_bytes"])

    @property
    def compute_s(self) -> float:
        """Time one device spends outside collectives."""
        return float(self._data["compute_s"])

    @property
    def communication_s(self) -> float:
        """Time one device spends in collectives (0 on one chip)."""
        return float(self._data["communication_s"])

    @property
    def exposed_communication_s(self) -> float:
        """Collective time not hidden behind compute: what it adds to the step."""
        return float(self._data["exposed_communication_s"])

    @property
    def network(self) -> Optional[str]:
        """The pod the collectives were priced on (topology and network model), if any."""
        value = self._data.get("network")
        return None if value is None else str(value)

    @property
    def ops(self) -> Any:
        """Per-instruction statistics, slowest first: a pandas ``DataFrame`` (one row
        per op, the columns of ``tpusim analyze --json``'s ``ops``) when pandas is
        installed, else a list of dicts (copies: editing either is harmless)."""
        rows = self.op_list
        try:
            # importlib keeps pandas optional for type checkers too (no stubs needed).
            pandas = importlib.import_module("pandas")
        except ImportError:
            return rows
        return pandas.DataFrame(rows)

    @property
    def op_list(self) -> List[Dict[str, Any]]:
        """Per-instruction statistics, slowest first, always as a list of dicts (copies)."""
        return copy.deepcopy(list(self._data["ops"]))

    @property
    def collectives(self) -> List[Dict[str, Any]]:
        """Priced collectives, longest first (empty on one chip; copies)."""
        return copy.deepcopy(list(self._data.get("collectives", [])))

    @property
    def hints(self) -> List[str]:
        return [str(h) for h in self._data.get("hints", [])]

    @property
    def assumptions(self) -> List[str]:
        return [str(a) for a in self._data.get("assumptions", [])]

    def to_json(self) -> str:
        """The analysis as JSON, exactly as ``tpusim analyze --json`` prints it."""
        return self._json

    def to_dict(self) -> Dict[str, Any]:
        """The analysis as a fresh dict (the parsed :meth:`to_json`)."""
        return copy.deepcopy(self._data)

    def __repr__(self) -> str:
        return (
            f"<tpusim.Report {self.module} on {self.chip}: step {_seconds(self.step_time_s)}, "
            f"{self.flops:.4g} FLOPs, MFU {100 * self.mfu:.1f}%>"
        )

    def __str__(self) -> str:
        """A multi-line summary: step time, bounds, memory, top ops, hints."""
        lines = [f"{self.module} on {self.chip}"]
        lines += [f"  {k:<16} {v}" for k, v in _summary_rows(self)]
        top = self.op_list[:5]
        if top:
            lines.append("  top ops")
            step = self.step_time_s or 1.0
            for o in top:
                t = float(o["time_s"])
                lines.append(
                    f"    {_seconds(t):>12} {100 * t / step:5.1f}%  {o['name']} ({o['bound']})"
                )
        for h in self.hints:
            lines.append(f"  hint: {h}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return _summary_html(self) + _roofline_svg(self) + _memory_html(self)

    def compare(self, other: "Report") -> "Comparison":
        """This analysis and ``other`` (another chip, mesh or program) side by side."""
        return Comparison(self, other)


class Comparison:
    """Two reports side by side: ``str()`` is a text table, ``_repr_html_`` an HTML one
    (Jupyter shows it); ``rows`` holds ``(figure, left, right, right/left)``."""

    def __init__(self, left: Report, right: Report) -> None:
        self.left = left
        self.right = right

    @property
    def rows(self) -> List[Tuple[str, str, str, str]]:
        a, b = self.left, self.right

        def ratio(x: float, y: float) -> str:
            return f"{y / x:.3g}x" if x else "-"

        return [
            ("chip", a.chip, b.chip, ""),
            ("network", a.network or "one device", b.network or "one device", ""),
            ("step time", _seconds(a.step_time_s), _seconds(b.step_time_s), ratio(a.step_time_s, b.step_time_s)),
            ("compute", _seconds(a.compute_s), _seconds(b.compute_s), ratio(a.compute_s, b.compute_s)),
            (
                "exposed communication",
                _seconds(a.exposed_communication_s),
                _seconds(b.exposed_communication_s),
                ratio(a.exposed_communication_s, b.exposed_communication_s),
            ),
            ("MFU", f"{100 * a.mfu:.1f}%", f"{100 * b.mfu:.1f}%", ratio(a.mfu, b.mfu)),
            (
                "peak memory",
                _gib(a.peak_memory_bytes),
                _gib(b.peak_memory_bytes),
                ratio(a.peak_memory_bytes, b.peak_memory_bytes),
            ),
        ]

    def __str__(self) -> str:
        head = ("", f"{self.left.module} on {self.left.chip}", f"{self.right.module} on {self.right.chip}", "ratio")
        table = [head] + self.rows
        widths = [max(len(r[i]) for r in table) for i in range(4)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)

    def __repr__(self) -> str:
        return f"<tpusim.Comparison {self.left.chip} vs {self.right.chip}>"

    def _repr_html_(self) -> str:
        cells = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows
        )
        return (
            "<table class='tpusim-compare'><tr><th></th>"
            f"<th>{html.escape(self.left.module)} on {html.escape(self.left.chip)}</th>"
            f"<th>{html.escape(self.right.module)} on {html.escape(self.right.chip)}</th>"
            f"<th>ratio</th></tr>{cells}</table>"
        )


def _gib(n: float) -> str:
    """Bytes in GiB, the one memory unit of every tpusim output."""
    return f"{n / 2**30:.3f} GiB"


def _made_of(kinds: List[Dict[str, Any]]) -> str:
    """What the memory peak holds, each kind of buffer: `59.200 GiB in 338 temporary buffers, ...`."""
    return ", ".join(
        f"{_gib(float(k.get('bytes', 0)))} in {k.get('buffers')} {k.get('kind')} buffer"
        + ("" if k.get("buffers") == 1 else "s")
        for k in kinds
    )


def _summary_rows(r: Report) -> List[Tuple[str, str]]:
    d = r.to_dict()
    rows = [
        ("step time", _seconds(r.step_time_s)),
        ("FLOPs", f"{r.flops:.4e}"),
        ("bytes accessed", f"{r.bytes_accessed:.4e}"),
        ("MFU", f"{100 * r.mfu:.1f}% of {d.get('mfu_dtype', '?')} peak"),
    ]
    memory = d.get("memory") or {}
    capacity = float(memory.get("capacity_bytes") or 0)
    peak = _gib(r.peak_memory_bytes)
    if capacity > 0:
        peak += f" of {_gib(capacity)} HBM ({100 * r.peak_memory_bytes / capacity:.1f}%)"
    rows.append(("peak memory", peak))
    kinds = memory.get("peak_by_kind") or []
    if kinds:
        rows.append(("made of", _made_of(kinds)))
    if r.network is not None:
        rows.append(("network", r.network))
        rows.append(
            (
                "communication",
                f"{_seconds(r.communication_s)} ({_seconds(r.exposed_communication_s)} exposed)",
            )
        )
    step = r.step_time_s or 1.0
    bounds = ", ".join(f"{k} {100 * v / step:.1f}%" for k, v in d.get("time_by_bound", {}).items())
    rows.append(("time by bound", bounds))
    return rows


def _memory_html(r: Report) -> str:
    """The buffers live at the memory peak, largest first."""
    memory = r.to_dict().get("memory") or {}
    buffers = sorted(memory.get("peak_buffers") or [], key=lambda b: -int(b.get("bytes", 0)))[:10]
    if not buffers:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(str(b.get('name')))}</td><td>{html.escape(str(b.get('shape')))}</td>"
        f"<td>{html.escape(str(b.get('kind')))}</td><td>{_gib(float(b.get('bytes', 0)))}</td></tr>"
        for b in buffers
    )
    return (
        "<div class='tpusim-memory'><h4>Memory at the peak</h4>"
        f"<p>peak {_gib(r.peak_memory_bytes)} at {_seconds(float(memory.get('peak_time_s') or 0))}</p>"
        "<table><tr><th>buffer</th><th>shape</th><th>kind</th><th>size</th></tr>"
        f"{rows}</table></div>"
    )


def _seconds(s: float) -> str:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if s >= scale:
            return f"{s / scale:.3f} {unit}"
    return f"{s * 1e9:.3f} ns"


def _summary_html(r: Report) -> str:
    d = r.to_dict()
    step = r.step_time_s or 1.0
    rows = [("module", r.module), ("chip", r.chip)] + _summary_rows(r)
    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    ops = "".join(
        "<tr>"
        f"<td>{html.escape(str(o['name']))}</td><td>{html.escape(str(o['category']))}</td>"
        f"<td>{_seconds(float(o['time_s']))}</td><td>{100 * float(o['time_s']) / step:.1f}</td>"
        f"<td>{html.escape(str(o['bound']))}</td></tr>"
        for o in d.get("ops", [])[:10]
    )
    return (
        "<div class='tpusim-report'>"
        f"<table>{body}</table>"
        "<table><tr><th>op</th><th>category</th><th>time</th><th>% step</th><th>bound</th></tr>"
        f"{ops}</table></div>"
    )


# Plot geometry of the inline roofline (pixels).
_W, _H, _PAD = 420, 260, 40


def _roofline_svg(r: Report) -> str:
    """Log-log roofline: achieved FLOP/s of each op against its FLOPs per HBM byte."""
    d = r.to_dict()
    peak = float(d.get("peak_flops_per_s") or 0.0)
    bandwidth = float(((r._chip or {}).get("memory") or {}).get("hbm_bandwidth_bytes_per_s") or 0.0)
    points = [
        (float(o["flops"]) / float(o["bytes_accessed"]), float(o["flops"]) / float(o["time_s"]))
        for o in d.get("ops", [])
        if float(o["flops"]) > 0 and float(o["bytes_accessed"]) > 0 and float(o["time_s"]) > 0
    ]
    if peak <= 0 or bandwidth <= 0:
        return ""
    ridge = peak / bandwidth
    xs = [p[0] for p in points] + [ridge / 100, ridge * 100]
    ys = [p[1] for p in points] + [peak]
    x0, x1 = math.log10(min(xs)) - 0.2, math.log10(max(xs)) + 0.2
    y1 = math.log10(peak) + 0.2
    y0 = min(math.log10(min(ys)), y1 - 4) - 0.2

    def sx(v: float) -> float:
        return _PAD + (math.log10(v) - x0) / (x1 - x0) * (_W - 2 * _PAD)

    def sy(v: float) -> float:
        return _H - _PAD - (math.log10(v) - y0) / (y1 - y0) * (_H - 2 * _PAD)

    lo = 10 ** x0
    roof = (
        f"<polyline fill='none' stroke='#444' stroke-width='1.5' points='"
        f"{sx(lo):.1f},{sy(max(lo * bandwidth, 10 ** y0)):.1f} {sx(ridge):.1f},{sy(peak):.1f} "
        f"{sx(10 ** x1):.1f},{sy(peak):.1f}'/>"
    )
    dots = "".join(
        f"<circle cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='3' fill='#1f77b4' fill-opacity='0.7'/>"
        for x, y in points
    )
    labels = (
        f"<text x='{_W / 2}' y='{_H - 8}' text-anchor='middle' font-size='11'>FLOPs per HBM byte (log)</text>"
        f"<text x='12' y='{_H / 2}' font-size='11' transform='rotate(-90 12 {_H / 2})' "
        "text-anchor='middle'>FLOP/s (log)</text>"
        f"<text x='{sx(ridge):.1f}' y='{sy(peak) - 6:.1f}' font-size='10'>peak {peak:.3g} FLOP/s</text>"
        f"<text x='{_PAD + 4}' y='{_H - _PAD - 6}' font-size='10'>HBM {bandwidth:.3g} B/s</text>"
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{_W}' height='{_H}' class='tpusim-roofline'>"
        f"<rect x='{_PAD}' y='{_PAD}' width='{_W - 2 * _PAD}' height='{_H - 2 * _PAD}' "
        "fill='none' stroke='#ccc'/>"
        f"{roof}{dots}{labels}</svg>"
    )
