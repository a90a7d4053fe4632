//! The Chrome trace, parsed back from its gzipped JSON as a viewer would read
//! it: slices nest strictly on every thread, threads and processes are named,
//! the HBM counter is there, flows are paired, scopes come from metadata.

mod common;

use flate2::read::GzDecoder;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use tpusim_report::{chrome_trace, TraceOptions};

/// Writes the trace gzipped and reads it back as plain JSON.
fn round_trip(trace: &tpusim_report::ChromeTrace) -> Value {
    let mut gz = Vec::new();
    trace.write_gz(&mut gz).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    let mut text = String::new();
    GzDecoder::new(&gz[..]).read_to_string(&mut text).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn events(v: &Value) -> &Vec<Value> {
    v["traceEvents"].as_array().expect("traceEvents array")
}

/// Microseconds as written -> whole nanoseconds.
fn ns(v: &Value) -> i64 {
    (v.as_f64().expect("number") * 1000.0).round() as i64
}

#[derive(Debug, Clone)]
struct Slice {
    name: String,
    start: i64,
    end: i64,
    /// Names of the enclosing slices, outermost first.
    parents: Vec<String>,
    event: usize,
}

fn thread_of(e: &Value) -> (u64, u64) {
    (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())
}

/// (start, end, index of the event naming the slice).
type Spans = Vec<(i64, i64, usize)>;
/// (time, is a `B`, event index) of `B`/`E` events.
type Marks = Vec<(i64, bool, usize)>;

/// Slices per thread: `X` events, and `B`/`E` pairs matched per thread in
/// time order (at equal times an `E` closes before a `B` opens, as in
/// Perfetto).
fn spans(v: &Value) -> BTreeMap<(u64, u64), Spans> {
    let mut out: BTreeMap<(u64, u64), Spans> = BTreeMap::new();
    let mut marks: BTreeMap<(u64, u64), Marks> = BTreeMap::new();
    for (k, e) in events(v).iter().enumerate() {
        match e["ph"].as_str() {
            Some("X") => {
                let (ts, dur) = (ns(&e["ts"]), ns(&e["dur"]));
                assert!(ts >= 0 && dur >= 0, "negative time in {e}");
                out.entry(thread_of(e)).or_default().push((ts, ts + dur, k));
            }
            Some(ph @ ("B" | "E")) => {
                marks
                    .entry(thread_of(e))
                    .or_default()
                    .push((ns(&e["ts"]), ph == "B", k))
            }
            _ => {}
        }
    }
    for (key, mut m) in marks {
        m.sort_unstable();
        let mut open = Vec::new();
        for (ts, is_begin, k) in m {
            if is_begin {
                open.push((ts, k));
            } else {
                let (start, b) = open.pop().expect("E without B");
                out.entry(key).or_default().push((start, ts, b));
            }
        }
        assert!(open.is_empty(), "B without E on {key:?}");
    }
    out
}

/// Rebuilds each thread's slice tree the way Perfetto does (sort by start,
/// longer first, file order on ties; a slice must end within its parent)
/// and fails on any improper nesting.
fn nest(v: &Value) -> BTreeMap<(u64, u64), Vec<Slice>> {
    let by_thread = spans(v);
    let mut out = BTreeMap::new();
    for (key, mut slices) in by_thread {
        slices.sort_by_key(|&(s, e, k)| (s, std::cmp::Reverse(e), k));
        let mut stack: Vec<Slice> = Vec::new();
        let mut done = Vec::new();
        for (start, end, k) in slices {
            while let Some(top) = stack.last() {
                if start >= top.end && !(start == top.start && end == top.end) {
                    done.push(stack.pop().unwrap());
                } else {
                    break;
                }
            }
            if let Some(top) = stack.last() {
                assert!(
                    end <= top.end,
                    "slice {} [{start}, {end}] overlaps its parent {} [{}, {}] on {key:?}",
                    events(v)[k]["name"],
                    top.name,
                    top.start,
                    top.end
                );
            }
            let parents = stack.iter().map(|s| s.name.clone()).collect();
            stack.push(Slice {
                name: events(v)[k]["name"].as_str().unwrap().to_string(),
                start,
                end,
                parents,
                event: k,
            });
        }
        done.extend(stack);
        out.insert(key, done);
    }
    out
}

fn metadata_names(v: &Value, name: &str) -> HashMap<(u64, Option<u64>), String> {
    events(v)
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == name)
        .map(|e| {
            (
                (e["pid"].as_u64().unwrap(), e["tid"].as_u64()),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every flow id has one source (out only), one sink (in only) and steps
/// (both) in between, each on an `X` slice, in time order.
fn check_flows(v: &Value) -> usize {
    let mut flows: BTreeMap<u64, Vec<(i64, bool, bool)>> = BTreeMap::new();
    for e in events(v) {
        if let Some(id) = e["bind_id"].as_u64() {
            assert!(
                e["ph"] == "X" || e["ph"] == "B",
                "flow on a non-slice event {e}"
            );
            let fin = e["flow_in"].as_bool().unwrap_or(false);
            let fout = e["flow_out"].as_bool().unwrap_or(false);
            assert!(fin || fout, "bind_id without direction: {e}");
            flows.entry(id).or_default().push((ns(&e["ts"]), fin, fout));
        }
        assert!(
            !matches!(e["ph"].as_str(), Some("s" | "t" | "f")),
            "unexpected v1 flow event {e}"
        );
    }
    perfetto_flow_order(v);
    for (id, mut members) in flows.clone() {
        members.sort_by_key(|m| m.0);
        let sources = members.iter().filter(|m| m.2 && !m.1).count();
        let sinks = members.iter().filter(|m| m.1 && !m.2).count();
        assert_eq!((sources, sinks), (1, 1), "flow {id}: {members:?}");
        assert!(
            members[0].2 && !members[0].1,
            "flow {id} starts with its source"
        );
        assert!(members.last().unwrap().1, "flow {id} ends with its sink");
    }
    flows.len()
}

/// Replays the flow events in the order Perfetto's trace processor parses
/// a JSON trace: by time; at equal times `E` first, then complete (`X`)
/// slices longest first, then the rest; file order last. A flow's events
/// bind to the slice they sit on, so each must find its flow begun (and not
/// ended) when it is parsed.
fn perfetto_flow_order(v: &Value) {
    let evs = events(v);
    let mut order: Vec<(i64, i64, usize)> = evs
        .iter()
        .enumerate()
        .filter(|(_, e)| e["ts"].is_number())
        .map(|(k, e)| {
            let key = match e["ph"].as_str() {
                Some("E") => i64::MIN,
                Some("X") => i64::MAX - ns(&e["dur"]),
                _ => i64::MAX,
            };
            (ns(&e["ts"]), key, k)
        })
        .collect();
    order.sort_unstable();
    let mut live: HashMap<u64, bool> = HashMap::new();
    for (_, _, k) in order {
        let e = &evs[k];
        let Some(id) = e["bind_id"].as_u64() else {
            continue;
        };
        let fin = e["flow_in"].as_bool().unwrap_or(false);
        let fout = e["flow_out"].as_bool().unwrap_or(false);
        match (fin, fout) {
            (false, true) => assert!(live.insert(id, true).is_none(), "flow {id} begun twice"),
            (true, _) => assert_eq!(
                live.get(&id),
                Some(&true),
                "flow {id}: {} is parsed before the flow begins",
                e["name"]
            ),
            _ => {}
        }
        if fin && !fout {
            live.insert(id, false);
        }
    }
}

#[test]
fn scoped_step_trace_is_well_formed() {
    let sim = common::simulate("report/scoped_step.hlo", "v5e");
    let run = sim.run();
    let v = round_trip(&chrome_trace(&run, &TraceOptions::default()));
    assert_eq!(v["displayTimeUnit"], "ns");
    assert_eq!(v["otherData"]["generator"], "tpusim");
    let trees = nest(&v);

    // Processes and threads are named; every thread with slices has a name.
    let procs = metadata_names(&v, "process_name");
    assert_eq!(procs[&(0, None)], "device 0 (TPU v5e)");
    let threads = metadata_names(&v, "thread_name");
    for (pid, tid) in trees.keys() {
        assert!(
            threads.contains_key(&(*pid, Some(*tid))),
            "thread {tid} unnamed"
        );
    }
    let names: Vec<&str> = threads.values().map(String::as_str).collect();
    for lane in [
        "TensorCore (XLA ops)",
        "DMA (HBM copies)",
        "ICI (collectives)",
        "TensorCore async start/done",
    ] {
        assert!(names.contains(&lane), "{lane} missing from {names:?}");
    }

    // step > module > jit(train) > while > body > layer > dot, on the TensorCore.
    let tc = &trees[&(0, 1)];
    let dots: Vec<&Slice> = tc.iter().filter(|s| s.name == "d").collect();
    assert_eq!(dots.len(), 4, "one dot per loop iteration");
    for d in &dots {
        assert_eq!(
            d.parents,
            [
                "step 0",
                "scoped_step",
                "jit(train)",
                "while",
                "body",
                "layer"
            ],
            "{d:?}"
        );
        let e = &events(&v)[d.event];
        assert_eq!(e["args"]["opcode"], "dot");
        assert_eq!(e["args"]["bound"], "hbm");
        assert_eq!(e["args"]["flops"], 2.0 * 256.0 * 256.0 * 256.0);
        assert!(e["args"]["bytes_accessed"].as_f64().unwrap() > 0.0);
        assert_eq!(
            e["args"]["op_name"],
            "jit(train)/while/body/layer/dot_general"
        );
    }
    let iterations: Vec<u64> = dots
        .iter()
        .map(|d| {
            events(&v)[d.event]["args"]["loop_iteration"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(iterations, [0, 1, 2, 3]);
    // The fusion takes its fused root's scope.
    let t = tc.iter().find(|s| s.name == "t").unwrap();
    assert_eq!(t.parents.last().map(String::as_str), Some("layer"));
    // The step spans the whole program.
    let step = tc.iter().find(|s| s.name == "step 0").unwrap();
    assert_eq!(step.start, 0);
    assert_eq!(step.end, (sim.schedule.step_s * 1e9).round() as i64);

    // The all-reduce goes over ICI, the copy over DMA, each with one flow
    // start marker -> transfer -> done marker.
    assert_eq!(check_flows(&v), 2);
    let ici = &trees[&(0, 3)];
    assert!(ici.iter().any(|s| s.name == "ars"), "{ici:?}");
    let dma = &trees[&(0, 2)];
    assert!(dma.iter().any(|s| s.name == "cs"), "{dma:?}");

    // The counter is process-scoped and carries bytes.
    let counters: Vec<&Value> = events(&v)
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "HBM in use")
        .collect();
    assert_eq!(counters.len(), sim.memory.points.len());
    assert!(counters
        .iter()
        .all(|c| c["args"]["bytes"].is_f64() && c.get("tid").is_none()));
}

#[test]
fn devices_are_processes_with_their_own_flows() {
    let mut sim = common::simulate("report/scoped_step.hlo", "v5e");
    sim.analysis.devices = 4;
    let v = round_trip(&chrome_trace(&sim.run(), &TraceOptions::default()));
    let procs = metadata_names(&v, "process_name");
    for d in 0..4 {
        assert_eq!(procs[&(d, None)], format!("device {d} (TPU v5e)"));
    }
    assert_eq!(check_flows(&v), 8);
    let trees = nest(&v);
    assert_eq!(trees.keys().filter(|(_, tid)| *tid == 1).count(), 4);
    assert_eq!(v["otherData"]["devices_shown"], "4");

    let capped = TraceOptions {
        max_devices: 2,
        ..TraceOptions::default()
    };
    let v = round_trip(&chrome_trace(&sim.run(), &capped));
    assert_eq!(metadata_names(&v, "process_name").len(), 2);
    assert!(v["otherData"]["note"]
        .as_str()
        .unwrap()
        .contains("2 of 4 devices drawn"));
}

#[test]
fn capped_traces_stay_nested_and_say_what_they_left_out() {
    let sim = common::simulate("report/scoped_step.hlo", "v5e");
    let total = sim.schedule.events.len();
    let opts = TraceOptions {
        max_op_events: 5,
        ..TraceOptions::default()
    };
    let v = round_trip(&chrome_trace(&sim.run(), &opts));
    nest(&v);
    check_flows(&v);
    let ops = events(&v)
        .iter()
        .filter(|e| matches!(e["cat"].as_str(), Some("op" | "marker" | "dma" | "ici")))
        .count();
    assert_eq!(ops, 5);
    assert_eq!(
        v["otherData"]["op_events_left_out"],
        (total - 5).to_string()
    );
    assert!(v["otherData"]["note"]
        .as_str()
        .unwrap()
        .contains("left out"));
}

#[test]
fn real_jax_program_trace_nests_named_scopes() {
    let sim = common::simulate(
        "corpus/jax_generated/transformer_train_step.compiled.hlo",
        "v5e",
    );
    let v = round_trip(&chrome_trace(&sim.run(), &TraceOptions::default()));
    let trees = nest(&v);
    let tc = &trees[&(0, 1)];
    let ops: Vec<&Slice> = tc
        .iter()
        .filter(|s| events(&v)[s.event]["cat"] == "op")
        .collect();
    assert_eq!(
        ops.len(),
        sim.schedule.events.len(),
        "every schedule event is drawn"
    );
    // JAX names its scopes jit(step)/...; most ops sit under them.
    let scoped = ops
        .iter()
        .filter(|s| s.parents.get(2).is_some_and(|p| p.starts_with("jit(")))
        .count();
    assert!(
        scoped * 2 > ops.len(),
        "{scoped} of {} ops scoped",
        ops.len()
    );
    // Time on the TensorCore adds up to the analysis' step time.
    let busy: i64 = ops.iter().map(|s| s.end - s.start).sum();
    let step_ns = sim.analysis.step_time_s * 1e9;
    assert!(
        (busy as f64 - step_ns).abs() <= ops.len() as f64,
        "{busy} vs {step_ns}"
    );
}

#[test]
fn big_and_looping_real_programs_give_valid_traces() {
    for (rel, scoped) in [
        // XLA's Llama 3.1 8B train step: 31k instructions, no metadata.
        (
            "corpus/xla/zml__xla__xla__tools__benchmarks__hlo__hlo_llama31_8b_bf16_1x8.hlo",
            false,
        ),
        // A JAX scan: a while loop whose body ops carry scopes.
        ("corpus/jax_generated/scan_while.compiled.hlo", true),
    ] {
        let sim = common::simulate(rel, "v5e");
        let v = round_trip(&chrome_trace(&sim.run(), &TraceOptions::default()));
        let trees = nest(&v);
        check_flows(&v);
        let drawn = events(&v)
            .iter()
            .filter(|e| matches!(e["cat"].as_str(), Some("op" | "marker" | "dma" | "ici")))
            .count();
        assert_eq!(drawn, sim.schedule.events.len(), "{rel}");
        let tc = &trees[&(0, 1)];
        let with_scope = tc
            .iter()
            .filter(|s| events(&v)[s.event]["cat"] == "scope")
            .count();
        assert_eq!(with_scope > 0, scoped, "{rel}");
    }
}

#[test]
fn zero_length_transfers_keep_flows_and_nesting() {
    let sim = common::simulate_with("report/scoped_step.hlo", "v5e", 0.0);
    let v = round_trip(&chrome_trace(&sim.run(), &TraceOptions::default()));
    let instant_transfer = events(&v)
        .iter()
        .any(|e| e["cat"] == "ici" && e["ph"] == "X" && ns(&e["dur"]) == 0);
    assert!(instant_transfer, "the all-reduce takes no time");
    nest(&v);
    assert_eq!(check_flows(&v), 2);
}
