//! Memory the interpreter needs: a static estimate of the peak of live buffers,
//! checked against a cap before anything runs, and a per-allocation guard so a
//! huge result (a `broadcast` to a giant shape) is an error, never an abort.
//!
//! Sizes are the interpreter's own storage, not the device's: every integer is
//! held in 8 bytes, pred in 1, bf16/f16 in 2, f8 in 1, c64 in 8.

use crate::InterpError;
use std::collections::HashMap;
use tpusim_hlo::types::TypeKind;
use tpusim_hlo::{CompId, InstrId, Instruction, Module, Opcode, PrimitiveType as T, Shape};

/// Bytes the interpreter stores per element of `ty`.
pub fn storage_bytes_per_element(ty: T) -> u64 {
    match ty {
        T::Pred | T::F8E4M3FN | T::F8E5M2 => 1,
        T::Bf16 | T::F16 => 2,
        T::F32 => 4,
        T::F64 | T::C64 => 8,
        _ => match ty.kind() {
            TypeKind::Signed | TypeKind::Unsigned => 8,
            _ => ty.byte_size().max(1),
        },
    }
}

/// Interpreter storage of a value of `shape` (saturating; tokens are free).
pub fn storage_bytes(shape: &Shape) -> u64 {
    shape
        .leaves()
        .iter()
        .filter(|a| a.ty != T::Token)
        .map(|a| {
            a.dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d.max(0) as u64))
                .and_then(|n| n.checked_mul(storage_bytes_per_element(a.ty)))
                .unwrap_or(u64::MAX)
        })
        .fold(0u64, u64::saturating_add)
}

/// Fails when the result of `ins` alone would exceed `max_bytes`.
pub fn check_allocation(ins: &Instruction, max_bytes: u64) -> Result<(), InterpError> {
    if max_bytes == u64::MAX || allocates(ins.opcode) == Alloc::None {
        return Ok(());
    }
    let bytes = storage_bytes(&ins.shape);
    if bytes > max_bytes {
        return Err(InterpError::MemoryLimit(format!(
            "'{}' ({}) would allocate {}, over the memory limit of {}",
            ins.name,
            ins.shape,
            human(bytes),
            human(max_bytes)
        )));
    }
    Ok(())
}

/// Bytes `ins` allocates for its result (0 when it shares its operand's storage):
/// [`check_allocation`] fails exactly when this exceeds its limit.
pub fn allocation_bytes(ins: &Instruction) -> u64 {
    if allocates(ins.opcode) == Alloc::None {
        return 0;
    }
    storage_bytes(&ins.shape)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Alloc {
    /// Shares its operand's storage.
    None,
    /// A new buffer of the result's size.
    Result,
}

fn allocates(op: Opcode) -> Alloc {
    match op {
        Opcode::Parameter
        | Opcode::Copy
        | Opcode::OptBarrier
        | Opcode::Domain
        | Opcode::AddDependency
        | Opcode::AfterAll
        | Opcode::AsyncUpdate
        | Opcode::AllReduceDone => Alloc::None,
        _ => Alloc::Result,
    }
}

/// The estimate of [`estimate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Number of simulated devices.
    pub devices: u64,
    /// Peak live bytes of one device over the sequential schedule.
    pub per_device_peak: u64,
    /// Entry parameters of one device (included in the peak).
    pub per_device_parameters: u64,
    /// All devices together, plus `global_bytes`.
    pub total: u64,
    /// Global input and output arrays held beside the devices' buffers by a
    /// run on global arrays ([`check_run`]); 0 for [`estimate`].
    pub global_bytes: u64,
    /// The largest single buffers: (instruction name, bytes), largest first.
    pub largest: Vec<(String, u64)>,
}

/// Estimates the peak memory of running `m` on all the devices it is simulated
/// on ([`crate::spmd::simulated_devices`]): per device, the
/// entry parameters plus, at each instruction of the schedule (text order), the
/// live results plus the instruction's own result and the peak of the
/// computations it calls (fusion bodies, loop bodies, branches, reducers);
/// collectives also hold every participant's contribution.
pub fn estimate(m: &Module) -> MemoryEstimate {
    let devices = crate::spmd::simulated_devices(m).max(1);
    let mut memo = HashMap::new();
    let entry = m.entry();
    let params: u64 = entry
        .params
        .iter()
        .map(|&p| storage_bytes(&m.instr(p).shape))
        .fold(0, u64::saturating_add);
    let body = computation_peak(m, m.entry, devices, &mut memo, 0);
    let per_device_peak = params.saturating_add(body);
    // Buffers that are really allocated: entry parameters and results that own storage.
    let mut largest: Vec<(String, u64)> = m
        .instrs
        .iter()
        .enumerate()
        .filter(|(k, i)| {
            allocates(i.opcode) == Alloc::Result || entry.params.contains(&InstrId(*k as u32))
        })
        .map(|(_, i)| (i.name.clone(), storage_bytes(&i.shape)))
        .collect();
    largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    largest.dedup();
    largest.truncate(5);
    MemoryEstimate {
        devices,
        per_device_peak,
        per_device_parameters: params,
        total: per_device_peak.saturating_mul(devices),
        global_bytes: 0,
        largest,
    }
}

/// Fails with [`InterpError::MemoryLimit`] when the estimate exceeds `cap`,
/// naming the largest buffers; returns the estimate otherwise.
pub fn check(m: &Module, cap: u64) -> Result<MemoryEstimate, InterpError> {
    check_with_global_arrays(m, cap, 0)
}

/// [`check`] for a run on global arrays (`tpusim run`, `tpusim.run`): on
/// several devices the global inputs stay held while their shards run and
/// the global outputs are assembled from the result shards, so both are
/// added to the devices' peaks. `global_outputs` are the outputs' global
/// dims when known (an unpartitioned module); otherwise every device's
/// outputs are counted, an upper bound on what is assembled. Splitting and
/// assembling copy by runs and need nothing beyond the arrays.
pub fn check_run(
    m: &Module,
    cap: u64,
    global_outputs: Option<&[Vec<usize>]>,
) -> Result<MemoryEstimate, InterpError> {
    if crate::spmd::simulated_devices(m) <= 1 {
        return check(m, cap);
    }
    let inputs: u64 = crate::spmd::global_parameter_shapes(m)?
        .iter()
        .map(storage_bytes)
        .fold(0, u64::saturating_add);
    let root = &m.instr(m.entry().root).shape;
    let outputs = match global_outputs {
        Some(dims) => root
            .leaves()
            .iter()
            .zip(dims)
            .map(|(a, d)| {
                d.iter()
                    .try_fold(1u64, |n, &k| n.checked_mul(k as u64))
                    .and_then(|n| n.checked_mul(storage_bytes_per_element(a.ty)))
                    .unwrap_or(u64::MAX)
            })
            .fold(0, u64::saturating_add),
        None => storage_bytes(root).saturating_mul(crate::spmd::simulated_devices(m).max(1)),
    };
    check_with_global_arrays(m, cap, inputs.saturating_add(outputs))
}

fn check_with_global_arrays(
    m: &Module,
    cap: u64,
    global_bytes: u64,
) -> Result<MemoryEstimate, InterpError> {
    let mut e = estimate(m);
    e.global_bytes = global_bytes;
    e.total = e.total.saturating_add(global_bytes);
    if e.total > cap {
        let names: Vec<String> = e
            .largest
            .iter()
            .map(|(n, b)| format!("'{n}' {}", human(*b)))
            .collect();
        let global = if global_bytes > 0 {
            format!(" + {} of global inputs and outputs", human(global_bytes))
        } else {
            String::new()
        };
        return Err(InterpError::MemoryLimit(format!(
            "running this module needs about {} ({} device(s) × {} peak{global}), over the memory limit of {}; largest buffers: {}",
            human(e.total),
            e.devices,
            human(e.per_device_peak),
            human(cap),
            names.join(", ")
        )));
    }
    Ok(e)
}

/// Deeper nesting than this is treated as free (HLO has no recursion; this only
/// bounds work on malformed input).
const MAX_CALL_DEPTH: usize = 64;

/// Peak bytes a computation allocates beyond its parameters (which its caller owns).
fn computation_peak(
    m: &Module,
    c: CompId,
    devices: u64,
    memo: &mut HashMap<CompId, u64>,
    depth: usize,
) -> u64 {
    if let Some(&p) = memo.get(&c) {
        return p;
    }
    if depth > MAX_CALL_DEPTH {
        return 0;
    }
    let comp = m.comp(c);
    let pos: HashMap<InstrId, usize> = comp
        .instrs
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, i))
        .collect();
    // Position after which each result is dead (the root lives to the end).
    let mut last_use: Vec<usize> = (0..comp.instrs.len()).collect();
    for (i, &id) in comp.instrs.iter().enumerate() {
        for o in &m.instr(id).operands {
            if let Some(&p) = pos.get(o) {
                last_use[p] = last_use[p].max(i);
            }
        }
    }
    if let Some(&r) = pos.get(&comp.root) {
        last_use[r] = usize::MAX;
    }
    let mut frees: HashMap<usize, u64> = HashMap::new();
    let mut live = 0u64;
    let mut peak = 0u64;
    for (i, &id) in comp.instrs.iter().enumerate() {
        let ins = m.instr(id);
        let own = match allocates(ins.opcode) {
            Alloc::None => 0,
            Alloc::Result => storage_bytes(&ins.shape),
        };
        let inner = called(ins)
            .into_iter()
            .map(|callee| computation_peak(m, callee, devices, memo, depth + 1))
            .max()
            .unwrap_or(0);
        let exchange = if ins.opcode.category() == tpusim_hlo::OpCategory::Collective {
            ins.operands
                .iter()
                .map(|&o| storage_bytes(&m.instr(o).shape))
                .fold(0u64, u64::saturating_add)
                .saturating_mul(devices)
        } else {
            0
        };
        peak = peak.max(live.saturating_add(own.max(inner)).saturating_add(exchange));
        live = live.saturating_add(own);
        if last_use[i] != usize::MAX {
            *frees.entry(last_use[i]).or_default() += own;
        }
        live = live.saturating_sub(frees.remove(&i).unwrap_or(0));
    }
    memo.insert(c, peak);
    peak
}

/// Computations an instruction runs.
fn called(ins: &Instruction) -> Vec<CompId> {
    ins.attrs
        .iter()
        .flat_map(|a| match &a.value {
            tpusim_hlo::AttrValue::Comp(c) => vec![*c],
            tpusim_hlo::AttrValue::Comps(cs) => cs.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// Physical memory in bytes (MemTotal in /proc/meminfo), when known.
pub fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

/// The default cap on a run's estimated memory: 75% of physical memory, no
/// cap when that is unknown.
pub fn default_cap() -> u64 {
    physical_memory().map_or(u64::MAX, |b| b / 4 * 3)
}

/// `1.5 GiB`-style sizes for messages.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Parses `8G`, `512M`, `1.5GiB`, `1000000` (powers of 1024 for K/M/G/T).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 8G, 512M, 1000000)"))?;
    let mult: u64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{text}' (use K, M, G or T)"
            ))
        }
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size '{text}' out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(text: &str) -> Module {
        tpusim_hlo::parse_module(text).unwrap()
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert!(parse_size("8X").is_err());
        assert!(parse_size("G").is_err());
    }

    #[test]
    fn peak_counts_live_buffers_and_frees_dead_ones() {
        // p (400 B) is live throughout; a (400) dies after b; b (400) is the root.
        let m = module(
            "HloModule m\nENTRY e {\n  p = f32[100] parameter(0)\n  a = f32[100] negate(p)\n  b = f32[100] add(a, a)\n  ROOT c = f32[100] negate(b)\n}\n",
        );
        let e = estimate(&m);
        assert_eq!(e.per_device_parameters, 400);
        // At b: p + a + b; at c: p + b + c (a freed after b).
        assert_eq!(e.per_device_peak, 1200);
        assert_eq!(e.total, 1200);
    }

    #[test]
    fn devices_multiply_and_fusion_bodies_count() {
        let m = module(
            "HloModule m, num_partitions=4\nf {\n  x = f32[1000] parameter(0)\n  y = f32[1000] negate(x)\n  ROOT z = f32[1000] negate(y)\n}\nENTRY e {\n  p = f32[1000] parameter(0)\n  ROOT r = f32[1000] fusion(p), kind=kLoop, calls=f\n}\n",
        );
        let e = estimate(&m);
        // Parameter 4000 + inside the fusion y and z (8000).
        assert_eq!(e.per_device_peak, 12000);
        assert_eq!(e.total, 48000);
    }

    #[test]
    fn while_loops_count_their_body_peak_once() {
        // Body temporaries b and r (800 B) on top of the parameter (400 B); the
        // loop's trip count does not matter.
        let m = module(
            "HloModule m\ncond {\n  s = f32[100] parameter(0)\n  ROOT c = pred[] constant(false)\n}\nbody {\n  s = f32[100] parameter(0)\n  b = f32[100] negate(s)\n  ROOT r = f32[100] negate(b)\n}\nENTRY e {\n  p = f32[100] parameter(0)\n  ROOT w = f32[100] while(p), condition=cond, body=body\n}\n",
        );
        assert_eq!(estimate(&m).per_device_peak, 1200);
    }

    #[test]
    fn cap_refuses_and_names_the_largest_buffer() {
        let m = module(
            "HloModule m\nENTRY e {\n  c = f32[] constant(1)\n  ROOT big = f32[100000,100000] broadcast(c), dimensions={}\n}\n",
        );
        let err = check(&m, 1 << 30).unwrap_err().to_string();
        assert!(err.contains("'big'"), "{err}");
        assert!(err.contains("37.3 GiB"), "{err}");
        assert!(check(&m, 1 << 40).is_ok());
        let big = m.instrs.iter().find(|i| i.name == "big").unwrap();
        assert!(check_allocation(big, 1 << 30).is_err());
    }

    #[test]
    fn integer_storage_is_eight_bytes() {
        assert_eq!(storage_bytes(&Shape::array(T::S8, vec![10])), 80);
        assert_eq!(storage_bytes(&Shape::array(T::Bf16, vec![10])), 20);
        assert_eq!(
            storage_bytes(&Shape::array(T::F32, vec![i64::MAX, 4])),
            u64::MAX
        );
    }
}
