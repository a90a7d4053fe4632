//! Reading real profiles: a `jax.profiler.trace` log dir, one run folder or
//! one `.xplane.pb`, summarized per HLO op, per step, and by the idle gaps
//! between ops.
//!
//! Real files bend the schema (PROFILER_FORMATS.md §2.2): every plane may
//! have id 0, line ids are 64-bit hashes (negative too), a stat can appear
//! twice on one event, string stats are often references to stat metadata.
//! The reader accepts all of that; the first value of a duplicated stat wins.

use crate::xplane::{x_event, x_stat, XEvent, XLine, XPlane, XSpace, XStat};
use crate::TraceError;
use prost::Message;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One HLO op's executions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpSummary {
    pub name: String,
    /// The HLO module, when the profile says (`hlo_module`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub occurrences: u64,
    pub total_s: f64,
    pub avg_s: f64,
    /// Time not covered by ops nested inside it on its timeline (a `while`
    /// holds its body's ops).
    pub self_s: f64,
    /// Share of all op self time.
    pub percent: f64,
}

/// One step: a device `Steps` event or a host step annotation
/// (`StepTraceAnnotation`, an event with a `step_num` stat).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepSummary {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_num: Option<i64>,
    pub start_s: f64,
    pub duration_s: f64,
    /// Where it was recorded: the plane name.
    pub plane: String,
}

/// A stretch of a timeline between two ops where none ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gap {
    /// Plane and line of the timeline.
    pub timeline: String,
    pub after: String,
    pub before: String,
    pub start_s: f64,
    pub duration_s: f64,
}

/// Idle time between ops, over every timeline that ran ops.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IdleSummary {
    pub total_s: f64,
    pub count: u64,
    /// The longest gaps, longest first (at most [`MAX_GAPS`]).
    pub longest: Vec<Gap>,
}

/// Gaps an [`IdleSummary`] lists.
pub const MAX_GAPS: usize = 10;

/// A profile summarized per HLO op.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProfileSummary {
    /// The `.xplane.pb` files read.
    pub files: Vec<PathBuf>,
    /// Longest total time first.
    pub ops: Vec<OpSummary>,
    pub steps: Vec<StepSummary>,
    pub idle: IdleSummary,
    /// Sum of all op self time (nested ops counted once).
    pub op_time_s: f64,
}

/// The `.xplane.pb` files a path names: the file itself; every one in a run
/// folder; or, for a log dir, those of its newest run under
/// `plugins/profile/`. xprof's cache files (`*.SSTABLE`, `*.hlo_proto.pb`,
/// `ALL_HOSTS.*`) are not profiles and are ignored.
pub fn find_xplanes(path: &Path) -> Result<Vec<PathBuf>, TraceError> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let in_dir = |dir: &Path| -> Result<Vec<PathBuf>, TraceError> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| TraceError::Io {
                path: dir.to_path_buf(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(".xplane.pb"))
            })
            .collect();
        files.sort();
        Ok(files)
    };
    let here = in_dir(path)?;
    if !here.is_empty() {
        return Ok(here);
    }
    let runs_dir = path.join("plugins").join("profile");
    if runs_dir.is_dir() {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(&runs_dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        for run in runs.iter().rev() {
            let files = in_dir(run)?;
            if !files.is_empty() {
                return Ok(files);
            }
        }
    }
    Err(TraceError::NoProfile(path.to_path_buf()))
}

/// Decodes one `.xplane.pb`.
pub fn read_xspace(path: &Path) -> Result<XSpace, TraceError> {
    let bytes = std::fs::read(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    XSpace::decode(bytes.as_slice()).map_err(|source| TraceError::Decode {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads every profile `path` names (see [`find_xplanes`]) and summarizes it.
pub fn read_profile(path: &Path) -> Result<ProfileSummary, TraceError> {
    Ok(read_profile_spaces(path)?.0)
}

/// [`read_profile`], also returning the XSpaces read (their programs'
/// HloProtos are what [`crate::compare`] matches modules against).
pub fn read_profile_spaces(path: &Path) -> Result<(ProfileSummary, Vec<XSpace>), TraceError> {
    let files = find_xplanes(path)?;
    let mut spaces = Vec::new();
    for f in &files {
        spaces.push(read_xspace(f)?);
    }
    let mut s = summarize(&spaces);
    s.files = files;
    Ok((s, spaces))
}

/// A stat value with references resolved.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(String),
    Other,
}

impl Value {
    fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Uint(v) => i64::try_from(*v).ok(),
            Value::Double(v) => Some(*v as i64),
            _ => None,
        }
    }
}

/// Stat lookup for one plane.
struct PlaneView<'a> {
    plane: &'a XPlane,
}

impl<'a> PlaneView<'a> {
    fn stat_name(&self, id: i64) -> Option<&'a str> {
        self.plane.stat_metadata.get(&id).map(|m| m.name.as_str())
    }

    fn value(&self, s: &XStat) -> Value {
        match &s.value {
            Some(x_stat::Value::Int64Value(v)) => Value::Int(*v),
            Some(x_stat::Value::Uint64Value(v)) => Value::Uint(*v),
            Some(x_stat::Value::DoubleValue(v)) => Value::Double(*v),
            Some(x_stat::Value::StrValue(v)) => Value::Str(v.clone()),
            Some(x_stat::Value::RefValue(r)) => i64::try_from(*r)
                .ok()
                .and_then(|r| self.stat_name(r))
                .map_or(Value::Other, |n| Value::Str(n.to_string())),
            _ => Value::Other,
        }
    }

    /// Stats of an event: its metadata's first, then its own; the first
    /// value of a name wins.
    fn stats(&self, e: &XEvent) -> HashMap<&'a str, Value> {
        let mut out = HashMap::new();
        let md_stats = self
            .plane
            .event_metadata
            .get(&e.metadata_id)
            .map(|m| m.stats.as_slice())
            .unwrap_or(&[]);
        for s in e.stats.iter().chain(md_stats) {
            if let Some(name) = self.stat_name(s.metadata_id) {
                out.entry(name).or_insert_with(|| self.value(s));
            }
        }
        out
    }

    fn event_name(&self, e: &XEvent) -> &'a str {
        self.plane
            .event_metadata
            .get(&e.metadata_id)
            .map_or("", |m| m.name.as_str())
    }
}

/// Start in picoseconds from the line's origin, or `None` for an aggregated
/// event (`num_occurrences`).
fn start_ps(line: &XLine, e: &XEvent) -> Option<i128> {
    match e.data {
        Some(x_event::Data::OffsetPs(o)) => {
            Some(i128::from(line.timestamp_ns) * 1000 + i128::from(o))
        }
        Some(x_event::Data::NumOccurrences(_)) => None,
        None => Some(i128::from(line.timestamp_ns) * 1000),
    }
}

fn is_device_plane(name: &str) -> bool {
    name.starts_with("/device:")
}

/// An op event kept for the gap and self-time analysis.
struct Timed {
    key: OpKey,
    start: i128,
    end: i128,
}

/// (module, op name).
type OpKey = (Option<String>, String);

#[derive(Default)]
struct OpAcc {
    occurrences: u64,
    total_ps: i128,
    self_ps: i128,
}

/// Summarizes decoded spaces (several hosts' files of one run).
pub fn summarize(spaces: &[XSpace]) -> ProfileSummary {
    let mut ops: HashMap<OpKey, OpAcc> = HashMap::new();
    let mut steps = Vec::new();
    let mut gaps: Vec<Gap> = Vec::new();
    let mut idle = IdleSummary::default();
    for space in spaces {
        for plane in &space.planes {
            let view = PlaneView { plane };
            let device = is_device_plane(&plane.name);
            for line in &plane.lines {
                let op_line = device && line.name == "XLA Ops";
                let step_line = device && line.name == "Steps";
                let mut timed: Vec<Timed> = Vec::new();
                for e in &line.events {
                    let stats = view.stats(e);
                    let name = view.event_name(e);
                    let hlo_op = stats.get("hlo_op").and_then(Value::as_str);
                    if step_line || (!device && stats.contains_key("step_num")) {
                        if let Some(start) = start_ps(line, e) {
                            steps.push(StepSummary {
                                name: name.to_string(),
                                step_num: stats.get("step_num").and_then(Value::as_i64),
                                start_s: start as f64 * 1e-12,
                                duration_s: e.duration_ps as f64 * 1e-12,
                                plane: plane.name.clone(),
                            });
                        }
                        continue;
                    }
                    if !(op_line || hlo_op.is_some()) {
                        continue;
                    }
                    let op = hlo_op.unwrap_or(name).to_string();
                    let module = stats
                        .get("hlo_module")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    let n = match e.data {
                        Some(x_event::Data::NumOccurrences(n)) => n.max(0) as u64,
                        _ => 1,
                    };
                    let key = (module, op);
                    let acc = ops.entry(key.clone()).or_default();
                    let total = i128::from(e.duration_ps.max(0)) * i128::from(n);
                    acc.occurrences += n;
                    acc.total_ps += total;
                    acc.self_ps += total;
                    if let Some(start) = start_ps(line, e) {
                        timed.push(Timed {
                            key,
                            start,
                            end: start + i128::from(e.duration_ps.max(0)),
                        });
                    }
                }
                let timeline = format!("{} / {}", plane.name, line.name);
                timed.sort_by_key(|t| (t.start, std::cmp::Reverse(t.end)));
                nested_time(&timed, &mut ops);
                line_gaps(&timeline, &timed, &mut idle, &mut gaps);
            }
        }
    }
    gaps.sort_by(|a, b| b.duration_s.total_cmp(&a.duration_s));
    gaps.truncate(MAX_GAPS);
    idle.longest = gaps;
    let op_time_ps: i128 = ops.values().map(|a| a.self_ps).sum();
    let op_time_s = op_time_ps as f64 * 1e-12;
    let mut ops: Vec<OpSummary> = ops
        .into_iter()
        .map(|((module, name), a)| {
            let total_s = a.total_ps as f64 * 1e-12;
            let self_s = a.self_ps.max(0) as f64 * 1e-12;
            OpSummary {
                name,
                module,
                occurrences: a.occurrences,
                total_s,
                avg_s: if a.occurrences > 0 {
                    total_s / a.occurrences as f64
                } else {
                    0.0
                },
                self_s,
                percent: if op_time_s > 0.0 {
                    100.0 * self_s / op_time_s
                } else {
                    0.0
                },
            }
        })
        .collect();
    ops.sort_by(|a, b| {
        b.total_s
            .total_cmp(&a.total_s)
            .then_with(|| a.name.cmp(&b.name))
    });
    steps.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    ProfileSummary {
        files: Vec::new(),
        ops,
        steps,
        idle,
        op_time_s,
    }
}

/// Takes the time of ops nested inside another op (sorted by start, longest
/// first) off the enclosing op's self time.
fn nested_time(timed: &[Timed], ops: &mut HashMap<OpKey, OpAcc>) {
    let mut open: Vec<&Timed> = Vec::new();
    for t in timed {
        while open.last().is_some_and(|o| o.end <= t.start) {
            open.pop();
        }
        if let Some(parent) = open.last() {
            if t.end <= parent.end {
                if let Some(acc) = ops.get_mut(&parent.key) {
                    acc.self_ps -= t.end - t.start;
                }
            }
        }
        open.push(t);
    }
}

/// Adds the gaps between consecutive ops of one timeline (sorted by start;
/// ops may nest: a gap starts where everything before it has ended).
fn line_gaps(timeline: &str, timed: &[Timed], idle: &mut IdleSummary, gaps: &mut Vec<Gap>) {
    let mut iter = timed.iter();
    let Some(first) = iter.next() else {
        return;
    };
    let (mut end, mut last) = (first.end, &first.key.1);
    for t in iter {
        if t.start > end {
            let d = (t.start - end) as f64 * 1e-12;
            idle.total_s += d;
            idle.count += 1;
            gaps.push(Gap {
                timeline: timeline.to_string(),
                after: last.clone(),
                before: t.key.1.clone(),
                start_s: end as f64 * 1e-12,
                duration_s: d,
            });
            if gaps.len() > 4 * MAX_GAPS {
                gaps.sort_by(|a, b| b.duration_s.total_cmp(&a.duration_s));
                gaps.truncate(MAX_GAPS);
            }
        }
        if t.end >= end {
            end = t.end;
            last = &t.key.1;
        }
    }
}
