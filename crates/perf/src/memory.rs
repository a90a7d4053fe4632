//! HBM in use over time: buffer liveness along the replayed schedule.
//!
//! Every op the schedule runs allocates one buffer per array leaf of its
//! result when it starts; a buffer is freed when the last value referring to
//! it dies, at the end of the op that used it last. Values are reference
//! counted per invocation of a computation, so loop bodies, calls and
//! branches free their temporaries each time they run.
//! - Entry parameters and constants are allocated for the whole program; the
//!   entry's outputs stay allocated to the end.
//! - `tuple`, `get-tuple-element`, `bitcast` (and other forwarding ops) do
//!   not allocate: they name their operands' buffers.
//! - A `while` loop carries its state: the body's result becomes the next
//!   iteration's parameter; unchanged elements keep their buffers.
//! - An output listed in `input_output_alias` is written into its parameter's
//!   buffer and allocates nothing.
//! - A dynamic-update-slice (bare, or a fusion's root over a parameter nothing
//!   else reads) whose buffer operand is not used after it writes into that
//!   buffer and allocates nothing (XLA's buffer assignment shares an in-place
//!   op's operand buffer with its result): a scan's stacked buffer is one
//!   buffer, not one per iteration.
//! - An op may take over the buffer of an operand that dies at it, as XLA's
//!   buffer assignment shares it (`HloDataflowAnalysis::
//!   CanShareOperandBufferWithUser`): same shape, and the op elementwise on
//!   that operand, or a loop or input fusion whose parameter for it reaches
//!   the root only through elementwise ops and tuples ([`shareable_operands`]).
//!
//! Buffers are unpadded (no tiling or alignment) and nothing is rematerialized,
//! so this is an upper bound of what a live range allocator needs for this
//! schedule and a lower bound of any padding.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use tpusim_arch::Chip;
use tpusim_hlo::{InstrId, Module, Opcode, Shape};

/// Points the compacted timeline keeps at most.
pub const MAX_TIMELINE_POINTS: usize = 1000;

/// Bytes in use from `time_s` on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPoint {
    pub time_s: f64,
    pub bytes: u64,
}

/// What a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferKind {
    Parameter,
    Constant,
    Output,
    Temporary,
}

impl BufferKind {
    pub fn name(self) -> &'static str {
        match self {
            BufferKind::Parameter => "parameter",
            BufferKind::Constant => "constant",
            BufferKind::Output => "output",
            BufferKind::Temporary => "temporary",
        }
    }
}

/// A buffer live at the peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveBuffer {
    /// The HLO instruction that defines it.
    pub name: String,
    /// Shape of the buffer (one array leaf of the instruction's result).
    pub shape: String,
    pub bytes: u64,
    pub kind: BufferKind,
}

/// The bytes live at the peak that hold one kind of buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindAtPeak {
    pub kind: BufferKind,
    pub bytes: u64,
    pub buffers: usize,
}

impl KindAtPeak {
    /// `59.2 GiB in 338 temporary buffers`, the bytes as `bytes` writes them.
    pub fn phrase(&self, bytes: impl Fn(u64) -> String) -> String {
        let plural = if self.buffers == 1 { "" } else { "s" };
        format!(
            "{} in {} {} buffer{plural}",
            bytes(self.bytes),
            self.buffers,
            self.kind.name()
        )
    }
}

/// What the peak is made of: each kind's bytes and buffers, most bytes first.
pub fn peak_by_kind(peak_buffers: &[LiveBuffer]) -> Vec<KindAtPeak> {
    let mut kinds: Vec<KindAtPeak> = Vec::new();
    for b in peak_buffers {
        match kinds.iter_mut().find(|k| k.kind == b.kind) {
            Some(k) => {
                k.bytes = k.bytes.saturating_add(b.bytes);
                k.buffers += 1;
            }
            None => kinds.push(KindAtPeak {
                kind: b.kind,
                bytes: b.bytes,
                buffers: 1,
            }),
        }
    }
    kinds.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.kind.cmp(&b.kind)));
    kinds
}

/// HBM use of one program on one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryProfile {
    pub peak_bytes: u64,
    /// When the peak is first reached.
    pub peak_time_s: f64,
    /// Bytes in use over time, compacted to at most
    /// [`MAX_TIMELINE_POINTS`] points (each bucket keeps its low and high).
    pub timeline: Vec<MemoryPoint>,
    /// Buffers live at the peak, largest first.
    pub peak_buffers: Vec<LiveBuffer>,
    pub parameter_bytes: u64,
    pub output_bytes: u64,
    pub constant_bytes: u64,
    /// Bytes of outputs written into aliased (donated) parameters.
    pub aliased_bytes: u64,
    /// The chip's HBM capacity.
    pub capacity_bytes: u64,
    /// Set when the peak does not fit in HBM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Every buffer that took bytes, in allocation order (at most
    /// [`MAX_ALLOCATIONS`]); not serialized.
    #[serde(skip)]
    pub allocations: Vec<Allocation>,
}

/// Buffers [`MemoryProfile::allocations`] keeps at most.
pub const MAX_ALLOCATIONS: usize = 100_000;

/// One buffer's life.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    pub buffer: LiveBuffer,
    pub alloc_s: f64,
    /// `None`: still allocated at the end of the program.
    pub free_s: Option<f64>,
    /// The replay's order, finer than time: the buffer is live from record
    /// `alloc_seq` until before record `free_seq` (`None`: never freed). A
    /// buffer freed in the record it was made in was never live.
    pub alloc_seq: u64,
    pub free_seq: Option<u64>,
}

/// Index of a buffer in [`Mem::bufs`].
pub(crate) type BufId = u32;
/// The buffers of a value, one per array leaf of its shape.
pub(crate) type Value = Vec<BufId>;

struct Buf {
    instr: InstrId,
    leaf: u32,
    bytes: u64,
    refs: u32,
    kind: BufferKind,
    alloc_seq: u64,
    free_seq: u64,
    alloc_s: f64,
    free_s: Option<f64>,
}

/// The allocator state of a replay.
#[derive(Default)]
pub(crate) struct Mem {
    bufs: Vec<Buf>,
    /// Exact (u128): byte sizes come from the input and many saturated
    /// buffers would overflow a u64, then underflow when freed.
    in_use: u128,
    seq: u64,
    peak: u64,
    peak_s: f64,
    peak_seq: u64,
    points: Vec<MemoryPoint>,
    constants: HashMap<InstrId, BufId>,
    /// Leaves written into a donated parameter: (instr, leaf) → (parameter
    /// number, leaf of the parameter).
    in_place: HashMap<(InstrId, u32), (usize, u32)>,
    /// The parameter leaves of `in_place`: donated and written again.
    donated: HashSet<(usize, u32)>,
    /// The buffer of each entry parameter leaf, by (number, leaf).
    parameters: HashMap<(usize, u32), BufId>,
    aliased_bytes: u64,
    /// Bytes of outputs that took a donated parameter's memory back after the
    /// parameter's value had died (counted as outputs, not as new memory of
    /// the program's own).
    reoccupied_bytes: u64,
}

/// Number of array leaves of a shape.
pub(crate) fn leaf_count(s: &Shape) -> usize {
    match s {
        Shape::Tuple(t) => t.iter().map(leaf_count).sum(),
        _ => 1,
    }
}

/// The leaves of a shape in order, each as a shape.
fn leaf_shapes(s: &Shape, out: &mut Vec<Shape>) {
    match s {
        Shape::Tuple(t) => t.iter().for_each(|e| leaf_shapes(e, out)),
        _ => out.push(s.clone()),
    }
}

/// Leaf range of tuple element `k` of `s`.
pub(crate) fn element_leaves(s: &Shape, k: usize) -> Option<std::ops::Range<usize>> {
    let t = s.tuple_elements()?;
    let start: usize = t.iter().take(k).map(leaf_count).sum();
    Some(start..start + leaf_count(t.get(k)?))
}

impl Mem {
    pub(crate) fn new(m: &Module) -> Mem {
        let in_place = in_place_leaves(m);
        Mem {
            donated: in_place.values().copied().collect(),
            in_place,
            ..Mem::default()
        }
    }

    fn record(&mut self, time_s: f64) {
        self.seq += 1;
        let in_use = u64::try_from(self.in_use).unwrap_or(u64::MAX);
        if in_use > self.peak {
            self.peak = in_use;
            self.peak_s = time_s;
            self.peak_seq = self.seq;
        }
        match self.points.last_mut() {
            Some(p) if p.time_s == time_s => p.bytes = in_use,
            _ => self.points.push(MemoryPoint {
                time_s,
                bytes: in_use,
            }),
        }
    }

    fn new_buf(
        &mut self,
        instr: InstrId,
        leaf: u32,
        bytes: u64,
        kind: BufferKind,
        time_s: f64,
    ) -> BufId {
        self.bufs.push(Buf {
            instr,
            leaf,
            bytes,
            refs: 1,
            kind,
            alloc_seq: self.seq + 1,
            free_seq: u64::MAX,
            alloc_s: time_s,
            free_s: None,
        });
        self.in_use += u128::from(bytes);
        (self.bufs.len() - 1) as BufId
    }

    /// A fresh value for every leaf of `shape`, defined by `instr` at `time_s`.
    ///
    /// A leaf the program writes into a donated parameter lives in that
    /// parameter's memory, as XLA's buffer assignment places it: it takes
    /// the parameter's buffer over while the parameter's value is still live
    /// (it dies at this op), or else takes the memory back, which
    /// temporaries may have used in between (allocated anew).
    pub(crate) fn alloc(
        &mut self,
        instr: InstrId,
        shape: &Shape,
        kind: BufferKind,
        time_s: f64,
    ) -> Value {
        let mut leaves = Vec::new();
        leaf_shapes(shape, &mut leaves);
        let v = leaves
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let bytes = s.byte_size();
                let Some(&param) = self.in_place.get(&(instr, k as u32)) else {
                    return self.new_buf(instr, k as u32, bytes, kind, time_s);
                };
                self.aliased_bytes = self.aliased_bytes.saturating_add(bytes);
                match self.parameters.get(&param).copied() {
                    Some(b) if self.is_live(b) => {
                        self.share(&[b]);
                        b
                    }
                    Some(_) => {
                        self.reoccupied_bytes = self.reoccupied_bytes.saturating_add(bytes);
                        self.new_buf(instr, k as u32, bytes, BufferKind::Output, time_s)
                    }
                    // No parameter buffer is tracked: the memory is counted
                    // with the parameters.
                    None => self.new_buf(instr, k as u32, 0, kind, time_s),
                }
            })
            .collect();
        self.record(time_s);
        v
    }

    /// The entry's parameter number `number` (instruction `instr`), defined
    /// at the start. The caller keeps a parameter for the whole program,
    /// except a donated leaf that an output is written into: its memory is
    /// free once its value dies, as XLA's buffer assignment reuses it.
    pub(crate) fn parameter(&mut self, number: usize, instr: InstrId, shape: &Shape) -> Value {
        let v = self.alloc(instr, shape, BufferKind::Parameter, 0.0);
        for (leaf, &b) in v.iter().enumerate() {
            self.parameters.insert((number, leaf as u32), b);
            if !self.donated.contains(&(number, leaf as u32)) {
                self.share(&[b]);
            }
        }
        v
    }

    /// Whether buffer `b` is allocated.
    fn is_live(&self, b: BufId) -> bool {
        self.bufs
            .get(b as usize)
            .is_some_and(|buf| buf.free_seq == u64::MAX)
    }

    /// The buffer of constant `instr` (allocated once, never freed).
    pub(crate) fn constant(&mut self, instr: InstrId, shape: &Shape, time_s: f64) -> Value {
        let b = match self.constants.get(&instr) {
            Some(&b) => b,
            None => {
                let b = self.new_buf(instr, 0, shape.byte_size(), BufferKind::Constant, time_s);
                self.constants.insert(instr, b);
                self.record(time_s);
                b
            }
        };
        self.share(&[b])
    }

    /// What buffer `b` holds.
    pub(crate) fn kind(&self, b: BufId) -> Option<BufferKind> {
        self.bufs.get(b as usize).map(|buf| buf.kind)
    }

    /// Whether `instr`'s (single) result is an output written into a donated
    /// parameter: it lives in the parameter's memory (see [`Mem::alloc`]),
    /// never in an operand's buffer.
    pub(crate) fn writes_into_parameter(&self, instr: InstrId) -> bool {
        self.in_place.contains_key(&(instr, 0))
    }

    /// The size of buffer `b`.
    pub(crate) fn bytes(&self, b: BufId) -> Option<u64> {
        self.bufs.get(b as usize).map(|buf| buf.bytes)
    }

    /// A new reference to the same buffers.
    pub(crate) fn share(&mut self, v: &[BufId]) -> Value {
        for &b in v {
            if let Some(buf) = self.bufs.get_mut(b as usize) {
                buf.refs += 1;
            }
        }
        v.to_vec()
    }

    /// `v` with every leaf in a buffer of its own: a leaf whose buffer an
    /// earlier leaf already holds gets a fresh one of its size (XLA's copy
    /// insertion gives each loop-carried slot its own buffer, so that one
    /// zeros broadcast JAX passes for several stacked outputs of a scan is
    /// several buffers the loop updates in place).
    pub(crate) fn distinct(&mut self, v: Value, instr: InstrId, time_s: f64) -> Value {
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(v.len());
        let mut copied = false;
        for (leaf, b) in v.into_iter().enumerate() {
            if seen.insert(b) {
                out.push(b);
                continue;
            }
            let bytes = self.bytes(b).unwrap_or(0);
            let kind = match self.kind(b) {
                Some(BufferKind::Temporary) | None => BufferKind::Temporary,
                Some(k) => k,
            };
            out.push(self.new_buf(instr, leaf as u32, bytes, kind, time_s));
            self.release(vec![b], time_s);
            copied = true;
        }
        if copied {
            self.record(time_s);
        }
        out
    }

    /// Drops a reference to each buffer; those left unreferenced are freed.
    pub(crate) fn release(&mut self, v: Value, time_s: f64) {
        let mut freed = false;
        for b in v {
            let Some(buf) = self.bufs.get_mut(b as usize) else {
                continue;
            };
            buf.refs = buf.refs.saturating_sub(1);
            if buf.refs == 0 && buf.free_seq == u64::MAX {
                buf.free_seq = self.seq + 1;
                buf.free_s = Some(time_s);
                self.in_use -= u128::from(buf.bytes);
                freed = true;
            }
        }
        if freed {
            self.record(time_s);
        }
    }

    /// The profile, with `outputs` (the entry's result) marked as outputs.
    pub(crate) fn finish(mut self, m: &Module, chip: &Chip, outputs: &[BufId]) -> MemoryProfile {
        for &b in outputs {
            if let Some(buf) = self.bufs.get_mut(b as usize) {
                if buf.kind == BufferKind::Temporary {
                    buf.kind = BufferKind::Output;
                }
            }
        }
        let total = |kind: BufferKind, bufs: &[Buf]| -> u64 {
            bufs.iter()
                .filter(|b| b.kind == kind)
                .map(|b| b.bytes)
                .fold(0, u64::saturating_add)
        };
        let peak_seq = self.peak_seq;
        let mut leaves = HashMap::new();
        let mut peak_buffers: Vec<LiveBuffer> = self
            .bufs
            .iter()
            .filter(|b| b.bytes > 0 && b.alloc_seq <= peak_seq && b.free_seq > peak_seq)
            .map(|b| live_buffer(m, b, &mut leaves))
            .collect();
        peak_buffers.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
        let capacity = chip.memory.hbm_bytes;
        let warning = (self.peak > capacity)
            .then(|| over_memory(self.peak, capacity, &chip.id, &peak_buffers));
        let allocations = self
            .bufs
            .iter()
            .filter(|b| b.bytes > 0)
            .take(MAX_ALLOCATIONS)
            .map(|b| Allocation {
                buffer: live_buffer(m, b, &mut leaves),
                alloc_s: b.alloc_s,
                free_s: b.free_s,
                alloc_seq: b.alloc_seq,
                free_seq: (b.free_seq != u64::MAX).then_some(b.free_seq),
            })
            .collect();
        MemoryProfile {
            peak_bytes: self.peak,
            peak_time_s: self.peak_s,
            timeline: compact(&self.points, MAX_TIMELINE_POINTS),
            peak_buffers,
            parameter_bytes: total(BufferKind::Parameter, &self.bufs),
            output_bytes: total(BufferKind::Output, &self.bufs)
                .saturating_sub(self.reoccupied_bytes),
            constant_bytes: total(BufferKind::Constant, &self.bufs),
            aliased_bytes: self.aliased_bytes,
            capacity_bytes: capacity,
            warning,
            allocations,
        }
    }
}

/// Operands (by index) whose buffer op `id`'s result may take over when the
/// operand dies at it, by XLA's rule for an array result of the operand's
/// shape: an elementwise op on that operand, or a loop or input fusion whose
/// parameter for it reaches the root only through elementwise ops and
/// tuples. (Dynamic-update-slices are the in-place case, handled apart.)
pub(crate) fn shareable_operands(m: &Module, id: InstrId) -> Vec<usize> {
    let ins = m.instr(id);
    if ins.shape.tuple_elements().is_some() {
        return Vec::new();
    }
    let same_shape = |k: usize| {
        ins.operands
            .get(k)
            .is_some_and(|&o| m.instr(o).shape == ins.shape)
    };
    let fused = ins.opcode == Opcode::Fusion
        && matches!(
            ins.attr("kind"),
            Some(tpusim_hlo::AttrValue::Ident(k)) if k == "kLoop" || k == "kInput"
        );
    if ins.opcode.is_elementwise() {
        return (0..ins.operands.len()).filter(|&k| same_shape(k)).collect();
    }
    if !fused {
        return Vec::new();
    }
    let Some(&body) = ins.called_computations().first() else {
        return Vec::new();
    };
    let comp = m.comp(body);
    let users = tpusim_hlo::passes::distinct_users(m, body);
    // XLA's `AreTransitiveUsesElementwiseOrTuple`; a worklist, not
    // recursion: fused computations come from the input.
    let elementwise_only = |start: InstrId| {
        let mut seen: HashSet<InstrId> = HashSet::new();
        let mut todo = vec![start];
        while let Some(v) = todo.pop() {
            for &u in users.get(&v).map_or(&[][..], Vec::as_slice) {
                let op = m.instr(u).opcode;
                if !(op.is_elementwise() || op == Opcode::Tuple) {
                    return false;
                }
                if seen.insert(u) {
                    todo.push(u);
                }
            }
        }
        true
    };
    (0..ins.operands.len())
        .filter(|&k| same_shape(k))
        .filter(|&k| comp.params.get(k).is_some_and(|&p| elementwise_only(p)))
        .collect()
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

/// The out-of-memory warning: by how much the peak is over, what would have
/// to leave HBM for it to fit (the fewest temporaries live at the peak, the
/// largest first, or, when even the buffers that must stay exceed HBM,
/// those), and the fixes.
fn over_memory(peak: u64, capacity: u64, chip: &str, at_peak: &[LiveBuffer]) -> String {
    let over = peak - capacity;
    let head = format!(
        "peak HBM use {:.2} GiB exceeds the {:.2} GiB of one {chip} by {:.2} GiB",
        gib(peak),
        gib(capacity),
        gib(over)
    );
    const FIX: &str = "apply a remat policy (jax.checkpoint with \
                       jax.checkpoint_policies.dots_with_no_batch_dims_saveable) or shard the \
                       largest buffers over more devices";
    // The fewest temporaries, largest first (`at_peak` is sorted so), that
    // bring the peak under HBM.
    let mut freed = 0u64;
    let mut dropped = 0usize;
    for b in at_peak.iter().filter(|b| b.kind == BufferKind::Temporary) {
        if freed >= over {
            break;
        }
        freed = freed.saturating_add(b.bytes);
        dropped += 1;
    }
    if freed >= over {
        let shown: Vec<&str> = at_peak
            .iter()
            .filter(|b| b.kind == BufferKind::Temporary)
            .take(dropped.min(3))
            .map(|b| b.name.as_str())
            .collect();
        let more = match dropped.saturating_sub(3) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let which = match dropped {
            1 => "the largest temporary".to_string(),
            n => format!("the {n} largest temporaries"),
        };
        return format!(
            "{head}: it fits without {which} live at the peak ({}{more}: {:.2} GiB); {FIX}",
            shown.join(", "),
            gib(freed)
        );
    }
    // Parameters, outputs and constants alone are over: no rematerialization
    // saves this program; its persistent state must be split.
    let resident = peak.saturating_sub(freed);
    format!(
        "{head}: even without any temporary, its parameters, outputs and constants take {:.2} \
         GiB, more than HBM: shard them over at least {} times as many devices (FSDP) or keep \
         fewer of them (optimizer state in bf16, offloading)",
        gib(resident),
        resident.div_ceil(capacity.max(1))
    )
}

/// Describes buffer `b`; `leaves` caches each instruction's leaf shapes, so
/// describing all buffers of a 20k-element tuple stays linear.
fn live_buffer<'m>(
    m: &'m Module,
    b: &Buf,
    leaves: &mut HashMap<InstrId, Vec<&'m Shape>>,
) -> LiveBuffer {
    let ins = m.instr(b.instr);
    let leaves = leaves.entry(b.instr).or_insert_with(|| {
        let mut v = Vec::new();
        leaf_refs(&ins.shape, &mut v);
        v
    });
    let mut shape = String::new();
    if let Some(s) = leaves.get(b.leaf as usize) {
        tpusim_hlo::shape::write_shape(&mut shape, s, false);
    }
    let name = if leaves.len() > 1 {
        format!("{}{{{}}}", ins.name, b.leaf)
    } else {
        ins.name.clone()
    };
    LiveBuffer {
        name,
        shape,
        bytes: b.bytes,
        kind: b.kind,
    }
}

/// The leaves of a shape in [`leaf_shapes`] order, borrowed.
fn leaf_refs<'s>(s: &'s Shape, out: &mut Vec<&'s Shape>) {
    match s {
        Shape::Tuple(t) => t.iter().for_each(|e| leaf_refs(e, out)),
        _ => out.push(s),
    }
}

/// At most `max` points: the timeline cut into `max / 2` equal time buckets,
/// each keeping its lowest and highest point in time order (so the peak
/// survives).
pub fn compact(points: &[MemoryPoint], max: usize) -> Vec<MemoryPoint> {
    if points.len() <= max || max < 2 {
        return points.to_vec();
    }
    let buckets = max / 2;
    let (t0, t1) = (points[0].time_s, points[points.len() - 1].time_s);
    let span = (t1 - t0).max(f64::MIN_POSITIVE);
    let mut out: Vec<MemoryPoint> = Vec::with_capacity(max);
    let mut k = 0;
    while k < points.len() {
        let bucket =
            |p: &MemoryPoint| (((p.time_s - t0) / span * buckets as f64) as usize).min(buckets - 1);
        let b = bucket(&points[k]);
        let mut end = k;
        while end < points.len() && bucket(&points[end]) == b {
            end += 1;
        }
        let slice = &points[k..end];
        let lo = slice.iter().enumerate().min_by_key(|(_, p)| p.bytes);
        let hi = slice.iter().enumerate().max_by_key(|(_, p)| p.bytes);
        if let (Some((i, lo)), Some((j, hi))) = (lo, hi) {
            match i.cmp(&j) {
                std::cmp::Ordering::Less => out.extend([*lo, *hi]),
                std::cmp::Ordering::Greater => out.extend([*hi, *lo]),
                std::cmp::Ordering::Equal => out.push(*hi),
            }
        }
        k = end;
    }
    out
}

/// Leaves of entry instructions that `input_output_alias` writes into a
/// parameter: each aliased output index, traced from the entry root through
/// tuples, get-tuple-elements and bitcasts to the op that produces it, with
/// the parameter leaf it is written into.
fn in_place_leaves(m: &Module) -> HashMap<(InstrId, u32), (usize, u32)> {
    let mut out = HashMap::new();
    let params = &m.comp(m.entry).params;
    let root = m.entry().root;
    for alias in &m.config.input_output_alias {
        let mut shape = &m.instr(root).shape;
        let mut leaf = 0usize;
        let mut ok = true;
        for &k in &alias.output_index {
            let Ok(k) = usize::try_from(k) else {
                ok = false;
                break;
            };
            match (element_leaves(shape, k), shape.tuple_elements()) {
                (Some(r), Some(t)) => {
                    leaf += r.start;
                    shape = &t[k];
                }
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok || leaf_count(shape) != 1 {
            continue;
        }
        let Some(param_leaf) = usize::try_from(alias.parameter).ok().and_then(|n| {
            Some((
                n,
                parameter_leaf(m, *params.get(n)?, &alias.parameter_index)?,
            ))
        }) else {
            continue;
        };
        if let Some(p) = producer(m, root, leaf, 0) {
            if m.instr(p.0).opcode != Opcode::Parameter {
                out.insert(p, param_leaf);
            }
        }
    }
    out
}

/// The leaf of parameter `param` at tuple index `index` (a single array).
fn parameter_leaf(m: &Module, param: InstrId, index: &[i64]) -> Option<u32> {
    let mut shape = &m.instr(param).shape;
    let mut leaf = 0usize;
    for &k in index {
        let k = usize::try_from(k).ok()?;
        leaf += element_leaves(shape, k)?.start;
        shape = shape.tuple_elements()?.get(k)?;
    }
    (leaf_count(shape) == 1).then(|| u32::try_from(leaf).ok())?
}

/// The instruction and leaf that define leaf `leaf` of `id`'s value.
fn producer(m: &Module, id: InstrId, leaf: usize, depth: u32) -> Option<(InstrId, u32)> {
    if depth > 256 {
        return None;
    }
    let ins = m.instr(id);
    match ins.opcode {
        Opcode::Tuple => {
            let mut start = 0;
            for &o in &ins.operands {
                let n = leaf_count(&m.instr(o).shape);
                if leaf < start + n {
                    return producer(m, o, leaf - start, depth + 1);
                }
                start += n;
            }
            None
        }
        Opcode::GetTupleElement => {
            let &t = ins.operands.first()?;
            let k = ins.attr_int("index")?.max(0) as usize;
            let r = element_leaves(&m.instr(t).shape, k)?;
            producer(m, t, r.start + leaf, depth + 1)
        }
        Opcode::Bitcast => producer(m, *ins.operands.first()?, leaf, depth + 1),
        _ => Some((id, leaf as u32)),
    }
}
