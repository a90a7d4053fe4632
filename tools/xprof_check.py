"""Check that real xprof reads a tpusim XSpace like a TPU profile.

Usage: python3 tools/xprof_check.py FILE.xplane.pb EXPECTED.json
       python3 tools/xprof_check.py --modules FILE.xplane.pb...
         (each file's HloProto becomes an XLA module: graph_viewer prints it)
EXPECTED.json (written by crates/trace/tests/xprof.rs):
  {"step_s": s, "busy_s": TensorCore busy per step, "steps": n, "devices": d, "peak_bytes": b,
   "ops": {name: {"flops": per_run, "time_s": total, "occurrences": k}}}

Runs xprof's own conversions (the ones TensorBoard's profile plugin runs) on
a copy of the file and checks:
  - hlo_stats lists every op with our occurrences, total time, FLOPs and
    category (collectives, their async halves included, by kind), and
    the times sum to steps x devices x the predicted TensorCore busy time
    (the predicted step when nothing overlaps);
  - op_profile has the same ops (time, FLOPs and HBM bytes) under the program, whose
    total (IDLE included) is steps x devices x the predicted step;
  - roofline_model has rows, the chip's peaks, and the program's predicted
    FLOPs per HBM byte;
  - overview_page reports the device type and, per step, TensorCore compute
    equal to the predicted step;
  - memory_profile has one allocator per device whose lifetime peak is the
    predicted peak HBM use;
  - overview_page shows the predicted MXU and HBM utilization, and calls a
    program with a backward pass (a `transpose(` name scope) training;
  - graph_viewer prints the program (every op) and draws the graph around an
    op, from the HloProto in the metadata plane; memory_viewer's peak heap is
    the predicted peak;
  - trace_viewer has every op event and one step per step and device;
    input_pipeline_analyzer one column per step; framework_op_stats the busy
    time; pod_viewer a step breakdown per step and core whose compute,
    collectives and transfers add up to the busy time and whose parts add up
    to the step.
Prints one line per tool; exits 1 on the first mismatch. Needs `pip install xprof`.
"""
import json
import math
import os
import shutil
import sys
import tempfile

REL = 1e-3  # times are integer picoseconds; xprof prints µs with 6 decimals


def close(a, b, rel=REL, abs_=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def table_rows(t):
    ids = [c["id"] for c in t["cols"]]
    return [dict(zip(ids, [c.get("v") for c in r["c"]])) for r in t["rows"]]


def main():
    path, want_path = sys.argv[1], sys.argv[2]
    want = json.load(open(want_path))
    from xprof.convert import raw_to_tool_data as r

    # xprof writes cache files next to its input: work on a copy.
    tmp = tempfile.mkdtemp()
    copy = os.path.join(tmp, os.path.basename(path))
    shutil.copy(path, copy)
    tools = r.xspace_to_tool_names([copy])
    print("tools offered:", ", ".join(tools))

    def tool(name):
        data, _ = r.xspace_to_tool_data([copy], name, {})
        if not data:
            fail(f"{name}: no data")
        return json.loads(data)

    devices = want.get("devices", 1)
    busy_s = want.get("busy_s", want["step_s"])
    # Time on the XLA Ops lines (TensorCore) over all steps and devices.
    total_s = busy_s * want["steps"] * devices
    ops = want["ops"]

    # hlo_stats
    rows = {row["hlo_op_name"]: row for row in table_rows(tool("hlo_stats"))}
    for name, w in ops.items():
        row = rows.get(name)
        if row is None:
            fail(f"hlo_stats: op {name} missing (have {sorted(rows)[:10]}...)")
        if int(row["occurrences"]) != w["occurrences"]:
            fail(f"hlo_stats: {name} occurrences {row['occurrences']} != {w['occurrences']}")
        if not close(row["total_time"] * 1e-6, w["time_s"]):
            fail(f"hlo_stats: {name} total time {row['total_time']} us != {w['time_s'] * 1e6}")
        if "category" in w and row["category"] != w["category"]:
            fail(f"hlo_stats: {name} category {row['category']} != {w['category']}")
        flops = row["model_flop_rate"] * 1e9 * row["total_time"] * 1e-6
        if not close(flops, w["flops"] * w["occurrences"], abs_=1.0):
            fail(f"hlo_stats: {name} flops {flops} != {w['flops'] * w['occurrences']}")
    hlo_total = sum(row["total_time"] for row in rows.values()) * 1e-6
    if not close(hlo_total, total_s):
        fail(f"hlo_stats: op times sum to {hlo_total} s, predicted {total_s} s")
    print(f"hlo_stats: {len(rows)} ops, {hlo_total * 1e6:.3f} us in all = {want['steps']} steps x "
          f"{devices} devices x predicted TensorCore busy time")

    # op_profile
    prof = tool("op_profile")
    leaves = {}

    def walk(node):
        # With the program's HloProto, a fusion node lists its fused
        # instructions as children: take every op node, the outermost first.
        if "xla" in node:
            leaves.setdefault(node["name"], node["metrics"])
        for k in node.get("children", []):
            walk(k)

    walk(prof["byProgram"])
    for name, w in ops.items():
        m = leaves.get(name)
        if m is None:
            fail(f"op_profile: op {name} missing")
        if not close(m["rawTime"] * 1e-12, w["time_s"]):
            fail(f"op_profile: {name} rawTime {m['rawTime']} ps != {w['time_s'] * 1e12}")
        if not close(m.get("rawFlops", 0), w["flops"] * w["occurrences"], abs_=1.0):
            fail(f"op_profile: {name} rawFlops {m.get('rawFlops')} != {w['flops'] * w['occurrences']}")
        # HBM bytes (memory space 0 of the op profile's arrays): what the op moves per run.
        hbm = (m.get("rawBytesAccessedArray") or [0])[0]
        if "bytes" in w and not close(hbm, w["bytes"] * w["occurrences"], rel=1e-6, abs_=w["occurrences"]):
            fail(f"op_profile: {name} HBM bytes {hbm} != {w['bytes'] * w['occurrences']}")
    # The program total includes IDLE: the whole steps on every device.
    step_total_s = want["step_s"] * want["steps"] * devices
    prof_total = prof["byProgram"]["metrics"]["rawTime"] * 1e-12
    if not close(prof_total, step_total_s):
        fail(f"op_profile: total {prof_total} s != {step_total_s} s")
    op_sum = sum(m["rawTime"] for n, m in leaves.items() if n in ops) * 1e-12
    if not close(op_sum, total_s):
        fail(f"op_profile: ops sum to {op_sum} s != {total_s} s")
    util = prof["byProgram"]["metrics"].get("bandwidthUtils", [0])[0]
    print(f"op_profile: {len(leaves)} ops, {prof['deviceType']}, total {prof_total * 1e6:.3f} us, "
          f"HBM bandwidth utilization {100 * util:.1f}%")

    # roofline_model
    roof = tool("roofline_model")
    props = roof[0].get("p", {})
    nrows = len(roof[0].get("rows", []))
    if nrows == 0 or float(props.get("peak_flop_rate", 0)) <= 0 or float(props.get("peak_hbm_bw", 0)) <= 0:
        fail(f"roofline_model: empty ({nrows} rows, {props})")
    # The program's row: its FLOPs per HBM byte are the predicted ones.
    ids = [c["id"] for c in roof[0]["cols"]]
    rrows = [dict(zip(ids, [c.get("v") for c in row["c"]])) for row in roof[0]["rows"]]
    program = next(row for row in rrows if row.get("operation") == "Program")
    flops = sum(w["flops"] * w["occurrences"] for w in ops.values())
    moved = sum(w.get("bytes", 0) * w["occurrences"] for w in ops.values())
    if moved > 0 and not close(program["operational_intensity"], flops / moved, rel=1e-3):
        fail(f"roofline_model: program FLOP/byte {program['operational_intensity']} != {flops / moved}")
    print(f"roofline_model: {nrows} rows, peak {props['peak_flop_rate']} GFLOP/s, "
          f"HBM {props['peak_hbm_bw']} GiB/s, ridge {props['hbm_ridge_point']}; program "
          f"{program['operational_intensity']:.1f} FLOP/byte as predicted, bound by {program['bound_by']}")

    # overview_page
    ov = tool("overview_page")
    env = next((t for t in ov if t.get("p", {}).get("device_type")), None)
    steps = next((t for t in ov if any(c["id"] == "stepnum" for c in t.get("cols", []))), None)
    if env is None or steps is None or len(steps["rows"]) != want["steps"]:
        fail("overview_page: no device type or step table")
    for row in table_rows(steps):
        if not close(row["tcComputeTimeMs"] * 1e-3, busy_s):
            fail(f"overview_page: step {row['stepnum']} TensorCore compute {row['tcComputeTimeMs']} ms "
                 f"!= {busy_s * 1e3} ms")
    p = ov[0]["p"]
    for key, w in (("mxu_utilization_percent", want["mxu_percent"]), ("hbm_utilization_percent", want["hbm_percent"])):
        if p.get(key) != f"{w:.1f}%":
            fail(f"overview_page: {key} {p.get(key)} != predicted {w:.1f}%")
    print(f"overview_page: MXU utilization {p['mxu_utilization_percent']}, HBM utilization "
          f"{p['hbm_utilization_percent']} as predicted")
    print(f"overview_page: device {env['p']['device_type']}, {len(steps['rows'])} steps of "
          f"{table_rows(steps)[0]['tcComputeTimeMs'] * 1e3:.3f} us TensorCore compute, "
          f"duty cycle {ov[0]['p'].get('device_duty_cycle_percent')}")
    # memory_profile: the simulated allocator's events, one allocator per device
    mp = tool("memory_profile")["memoryProfilePerAllocator"]
    if len(mp) != devices:
        fail(f"memory_profile: {len(mp)} allocators for {devices} devices")
    for alloc, prof in mp.items():
        peak = int(prof["profileSummary"]["peakBytesUsageLifetime"])
        if peak != want["peak_bytes"]:
            fail(f"memory_profile: allocator {alloc} peak {peak} != {want['peak_bytes']}")
    snap = next(iter(mp.values()))["memoryProfileSnapshots"][0]["activityMetadata"]
    print(f"memory_profile: {len(mp)} allocator(s), peak {want['peak_bytes']} B as predicted, "
          f"e.g. {snap['regionType']} {snap['dataType']} {snap['tensorShape']}")
    training = next((t["p"]["is_training"] for t in ov if "is_training" in t.get("p", {})), None)
    if "is_training" in want and training != ("true" if want["is_training"] else "false"):
        fail(f"overview_page: is_training {training}, expected {want['is_training']}")
    print(f"overview_page: is_training {training}")
    host = ov[0]["p"].get("host_tf_op_percent")
    if host != "0.0%":
        fail(f"overview_page: op placement puts {host} of the ops on the host")
    print(f"overview_page: op placement host {host}, device {ov[0]['p'].get('device_tf_op_percent')}")

    # graph_viewer: the program as HLO text, and the graph around an op.
    module = want["module"]
    for tool_name in ("graph_viewer", "memory_viewer"):
        if tool_name not in tools:
            fail(f"{tool_name} not offered: xprof found no HloProto in the XSpace")

    def graph(kind, node="", fmt=""):
        opts = {"module_name": module, "type": kind, "node_name": node, "graph_width": 3, "format": fmt}
        data, _ = r.xspace_to_tool_data([copy], "graph_viewer", {"graph_viewer_options": opts})
        return data.decode() if isinstance(data, bytes) else data

    text = graph("long_txt")
    missing = [n for n in ops if f"%{n} = " not in text]
    if not text.startswith("HloModule ") or missing:
        fail(f"graph_viewer: module text lacks ops {missing[:5]}")
    first = next(iter(ops))
    dot = graph("graph", first, "dot")
    if f"around {first}" not in dot:
        fail(f"graph_viewer: no graph around {first}")
    print(f"graph_viewer: {module} as HLO text with all {len(ops)} ops; graph around {first}")

    # memory_viewer: the buffer assignment's peak is the predicted peak.
    data, _ = r.xspace_to_tool_data([copy], "memory_viewer", {"module_name": module, "memory_space": "0"})
    mv = json.loads(data)
    peak = round(mv["peakHeapMib"] * 2**20)
    if peak != want["peak_bytes"]:
        fail(f"memory_viewer: peak heap {peak} B != predicted {want['peak_bytes']} B")
    print(f"memory_viewer: peak {peak} B as predicted, {len(mv['logicalBufferSpans'])} buffers, "
          f"parameters {mv['entryComputationParametersMib'] * 2**20:.0f} B")

    # trace_viewer: every op event of every step and device.
    data, _ = r.xspace_to_tool_data([copy], "trace_viewer@", {"trace_viewer_options": {}})
    tv = json.loads(data)
    names = [e.get("name") for e in tv["traceEvents"] if e.get("ph") == "X"]
    for name, w in ops.items():
        if names.count(name) != w["occurrences"]:
            fail(f"trace_viewer: {name} appears {names.count(name)} times, not {w['occurrences']}")
    steps_seen = sum(1 for e in tv["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 1)
    if steps_seen != want["steps"] * devices:
        fail(f"trace_viewer: {steps_seen} step events != {want['steps']} x {devices}")
    print(f"trace_viewer: {len(names)} events, {steps_seen} device-side steps")

    # input_pipeline_analyzer: one column per step, no time waiting for input.
    ip = tool("input_pipeline_analyzer")
    step_rows = next(t for t in ip if any(c["id"] == "stepnum" for c in t.get("cols", [])))
    if len(step_rows["rows"]) != want["steps"] or step_rows["p"].get("infeed_percent_average") != "0.0":
        fail(f"input_pipeline_analyzer: {len(step_rows['rows'])} steps, infeed {step_rows['p'].get('infeed_percent_average')}")
    print(f"input_pipeline_analyzer: {len(step_rows['rows'])} steps, {step_rows['p']['infeed_percent_average']}% waiting for input")

    # framework_op_stats: the device ops (by JAX scope) add up to the busy time.
    fo = table_rows(tool("framework_op_stats")[0])
    dev = sum(row["total_self_time"] for row in fo if row["host_or_device"] == "Device") * 1e-6
    if not close(dev, total_s):
        fail(f"framework_op_stats: device self time {dev} s != {total_s} s")
    print(f"framework_op_stats: {len(fo)} rows, device self time {dev * 1e6:.3f} us as predicted")

    # pod_viewer: per step, every core's step breakdown (from each device plane's
    # core_details): the step's time split into TensorCore compute, collectives and
    # device-to-device transfers (together the predicted busy time) and idle.
    pv = tool("pod_viewer")
    steps_pv = pv["podStatsSequence"]["podStatsMap"]
    if len(steps_pv) != want["steps"] or not pv.get("deviceType", "").startswith("TPU"):
        fail(f"pod_viewer: {len(steps_pv)} steps, device {pv.get('deviceType')}")
    names = {e["id"]: e["name"] for e in pv["stepBreakdownEvents"]}
    for step in steps_pv:
        cores = step.get("podStatsPerCore", {})
        if len(cores) != devices:
            fail(f"pod_viewer: step {step['stepNum']} has {len(cores)} cores, not {devices}")
        for core, rec in cores.items():
            parts = {names[int(k)]: v * 1e-6 for k, v in rec["stepBreakdownUs"].items()}
            busy = parts["Device compute"] + parts["Device collective communication"] + parts["Device to device"]
            if not close(rec["totalDurationUs"] * 1e-6, want["step_s"]) or not close(busy, busy_s):
                fail(f"pod_viewer: step {step['stepNum']} core {core}: {rec}")
            if not close(sum(parts.values()), want["step_s"]):
                fail(f"pod_viewer: step {step['stepNum']} core {core} breakdown sums to {sum(parts.values())} s")
    rec = next(iter(steps_pv[0]["podStatsPerCore"].values()))
    parts = {names[int(k)]: v for k, v in rec["stepBreakdownUs"].items() if v > 0}
    print(f"pod_viewer: {len(steps_pv)} steps x {devices} cores on {pv['deviceType']}, step "
          f"{rec['totalDurationUs']:.3f} us = " + ", ".join(f"{k} {v:.3f} us" for k, v in parts.items())
          + f"; bottleneck {rec['bottleneck']}")
    shutil.rmtree(tmp, ignore_errors=True)
    print("OK")


def check_modules(paths):
    """xprof turns the HloProto of every file into an XLA HloModule (its
    CreateFromProto checks each instruction) and prints it as HLO text."""
    import glob
    from xprof.convert import raw_to_tool_data as r

    for path in paths:
        tmp = tempfile.mkdtemp()
        copy = os.path.join(tmp, os.path.basename(path))
        shutil.copy(path, copy)
        r.xspace_to_tool_names([copy])
        names = [os.path.basename(p)[: -len(".hlo_proto.pb")] for p in glob.glob(os.path.join(tmp, "*.hlo_proto.pb"))]
        if len(names) != 1:
            fail(f"{path}: {len(names)} programs found")
        opts = {"module_name": names[0], "type": "long_txt", "node_name": "", "graph_width": 3, "format": ""}
        try:
            data, _ = r.xspace_to_tool_data([copy], "graph_viewer", {"graph_viewer_options": opts})
        except ValueError as e:
            fail(f"{path}: xprof cannot build the module: {e}")
        text = data.decode() if isinstance(data, bytes) else data
        if "HloModule " not in text:
            fail(f"{path}: no module text")
        print(f"{names[0]}: {text.count(chr(10))} lines of HLO")
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK")


if __name__ == "__main__":
    if sys.argv[1] == "--modules":
        check_modules(sys.argv[2:])
    else:
        main()
