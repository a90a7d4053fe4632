//! Many simulated devices in one process: one thread per device, all running the
//! same module, meeting at collectives through a shared [`Rendezvous`].
//!
//! Device `d` is replica `d % R`, partition `d / R` (XLA's default assignment
//! `device(r, p) = p*R + r`, HLO_SEMANTICS §10.1). The rendezvous never deadlocks:
//! when every device still running waits at a collective that cannot complete
//! (different collectives, or a participant already finished), every waiter stops
//! with [`InterpError::Collective`] naming where each device stood.

use crate::eval::{check_value_shape, run_entry};
use crate::limits::{Budget, RunLimits};
use crate::sharding::{self, TileMap};
use crate::value::{Array, Value};
use crate::InterpError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tpusim_hlo::attr::SingleSharding;
use tpusim_hlo::{InstrId, Module, Shape};

/// Stack for device threads: the interpreter recurses into called computations.
const DEVICE_STACK_BYTES: usize = 16 << 20;

/// Who a device thread is and how it reaches the others.
pub struct DeviceCtx<'a> {
    pub device: usize,
    pub replica: usize,
    pub partition: usize,
    pub replicas: usize,
    pub partitions: usize,
    pub(crate) rendezvous: &'a Rendezvous,
    /// Times each collective instruction has run on this device (loops run them again).
    occurrences: RefCell<HashMap<InstrId, u64>>,
}

impl DeviceCtx<'_> {
    /// The next occurrence number of collective `id` on this device.
    pub(crate) fn next_occurrence(&self, id: InstrId) -> u64 {
        let mut occ = self.occurrences.borrow_mut();
        let n = occ.entry(id).or_insert(0);
        *n += 1;
        *n
    }
}

/// One meeting point: the same instruction, occurrence and participant list.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MeetKey {
    pub instr: InstrId,
    pub occurrence: u64,
    pub participants: Vec<usize>,
}

struct Slot {
    contributions: Vec<Option<Value>>,
    ready: Option<Arc<Vec<Value>>>,
    taken: usize,
}

#[derive(Clone, Debug)]
enum Status {
    Running,
    Waiting(MeetKey),
    Done,
}

struct State {
    slots: HashMap<MeetKey, Slot>,
    status: Vec<Status>,
    abort: Option<String>,
}

/// The shared meeting place of all device threads.
pub(crate) struct Rendezvous {
    state: Mutex<State>,
    wake: Condvar,
    /// Instruction names, for messages.
    names: Vec<String>,
}

impl Rendezvous {
    fn new(m: &Module, devices: usize) -> Rendezvous {
        Rendezvous {
            state: Mutex::new(State {
                slots: HashMap::new(),
                status: vec![Status::Running; devices],
                abort: None,
            }),
            wake: Condvar::new(),
            names: m.instrs.iter().map(|i| i.name.clone()).collect(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another device thread panicked; the state is
        // still consistent because every update is a single assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Deposits `value` as participant `rank` of `key` and waits until every
    /// participant has; returns all contributions in rank order.
    pub(crate) fn exchange(
        &self,
        device: usize,
        key: MeetKey,
        rank: usize,
        value: Value,
    ) -> Result<Arc<Vec<Value>>, InterpError> {
        let n = key.participants.len();
        let mut st = self.lock();
        if let Some(why) = &st.abort {
            return Err(InterpError::Collective(why.clone()));
        }
        let slot = st.slots.entry(key.clone()).or_insert_with(|| Slot {
            contributions: vec![None; n],
            ready: None,
            taken: 0,
        });
        match slot.contributions.get_mut(rank) {
            Some(c @ None) => *c = Some(value),
            _ => {
                return Err(InterpError::Internal(format!(
                    "device {device} joined '{}' twice",
                    self.name(key.instr)
                )))
            }
        }
        if slot.contributions.iter().all(Option::is_some) {
            let all: Vec<Value> = slot
                .contributions
                .iter_mut()
                .filter_map(Option::take)
                .collect();
            slot.ready = Some(Arc::new(all));
            self.wake.notify_all();
        }
        loop {
            if let Some(slot) = st.slots.get_mut(&key) {
                if let Some(ready) = slot.ready.clone() {
                    slot.taken += 1;
                    if slot.taken == n {
                        st.slots.remove(&key);
                    }
                    st.status[device] = Status::Running;
                    return Ok(ready);
                }
            }
            if let Some(why) = &st.abort {
                return Err(InterpError::Collective(why.clone()));
            }
            st.status[device] = Status::Waiting(key.clone());
            self.detect_deadlock(&mut st);
            if st.abort.is_none() {
                st = self.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Stops every collective now and later with `why` (a device stopped on a
    /// limit: the others must not wait for it).
    pub(crate) fn abort(&self, why: &str) {
        let mut st = self.lock();
        if st.abort.is_none() {
            st.abort = Some(why.to_string());
        }
        self.wake.notify_all();
    }

    /// Marks `device` finished (with a result or an error) and wakes everyone.
    fn finish(&self, device: usize) {
        let mut st = self.lock();
        st.status[device] = Status::Done;
        self.detect_deadlock(&mut st);
        self.wake.notify_all();
    }

    /// Aborts when no device can make progress: all are finished or waiting at
    /// meetings that are not complete.
    fn detect_deadlock(&self, st: &mut State) {
        if st.abort.is_some() {
            return;
        }
        let mut stuck = Vec::new();
        for (d, s) in st.status.iter().enumerate() {
            match s {
                Status::Running => return,
                Status::Done => {}
                Status::Waiting(k) => {
                    if st.slots.get(k).is_some_and(|s| s.ready.is_some()) {
                        return;
                    }
                    stuck.push((d, k.clone()));
                }
            }
        }
        if stuck.is_empty() {
            return;
        }
        let done: Vec<usize> = (0..st.status.len())
            .filter(|&d| matches!(st.status[d], Status::Done))
            .collect();
        let mut parts: Vec<String> = stuck
            .iter()
            .take(8)
            .map(|(d, k)| {
                format!(
                    "device {d} waits at '{}' (occurrence {}) with devices {:?}",
                    self.name(k.instr),
                    k.occurrence,
                    k.participants
                )
            })
            .collect();
        if stuck.len() > 8 {
            parts.push(format!("{} more waiting", stuck.len() - 8));
        }
        if !done.is_empty() {
            parts.push(format!("devices {done:?} have stopped"));
        }
        st.abort = Some(parts.join("; "));
        self.wake.notify_all();
    }

    fn name(&self, id: InstrId) -> &str {
        self.names.get(id.index()).map_or("?", String::as_str)
    }
}

/// Calls [`Rendezvous::finish`] when dropped.
struct Finished<'a>(&'a Rendezvous, usize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}

/// Runs the entry computation on every device with its own arguments
/// (`args[d]` for device `d`) and returns each device's flattened result leaves.
/// `max_alloc` bounds any single result an instruction may allocate.
pub fn execute_devices(
    m: &Module,
    args: Vec<Vec<Value>>,
    max_alloc: u64,
) -> Result<Vec<Vec<Value>>, InterpError> {
    execute_devices_limited(m, args, max_alloc, &RunLimits::default())
}

/// [`execute_devices`] under `limits`: every device stops when one trips.
pub fn execute_devices_limited(
    m: &Module,
    args: Vec<Vec<Value>>,
    max_alloc: u64,
    limits: &RunLimits,
) -> Result<Vec<Vec<Value>>, InterpError> {
    let n = device_count(m)?;
    let replicas = m.config.replica_count.unwrap_or(1).max(1) as usize;
    let partitions = m.config.num_partitions.unwrap_or(1).max(1) as usize;
    execute_on(m, args, replicas, partitions, n, max_alloc, limits)
}

/// [`execute_devices`] with an explicit device grid of `n = replicas * partitions`,
/// under `limits`.
pub(crate) fn execute_on(
    m: &Module,
    args: Vec<Vec<Value>>,
    replicas: usize,
    partitions: usize,
    n: usize,
    max_alloc: u64,
    limits: &RunLimits,
) -> Result<Vec<Vec<Value>>, InterpError> {
    if args.len() != n {
        return Err(InterpError::BadArgument(format!(
            "the module runs on {n} devices, arguments for {} given",
            args.len()
        )));
    }
    let entry = m.entry();
    for (d, a) in args.iter().enumerate() {
        // "of device d" only where there is more than one device.
        let on_device = if n > 1 {
            format!(" of device {d}")
        } else {
            String::new()
        };
        if a.len() != entry.params.len() {
            return Err(InterpError::BadArgument(format!(
                "the entry computation takes {} parameters, {} given{on_device}",
                entry.params.len(),
                a.len()
            )));
        }
        for (i, (&p, v)) in entry.params.iter().zip(a).enumerate() {
            check_value_shape(&m.instr(p).shape, v)
                .map_err(|e| InterpError::BadArgument(format!("parameter {i}{on_device}: {e}")))?;
        }
    }
    let rendezvous = Rendezvous::new(m, n);
    let budget = Budget::new(limits);
    let ctx = |device: usize| DeviceCtx {
        device,
        replica: device % replicas,
        partition: device / replicas,
        replicas,
        partitions,
        rendezvous: &rendezvous,
        occurrences: RefCell::new(HashMap::new()),
    };
    let run_one = |device: usize, a: Vec<Value>| {
        // Marks the device finished however it stops, even by unwinding, so
        // the others never wait for it forever.
        let _finished = Finished(&rendezvous, device);
        run_entry(m, &ctx(device), max_alloc, &budget, a)
    };
    let results: Vec<Result<Vec<Value>, InterpError>> = if n == 1 {
        args.into_iter().map(|a| run_one(0, a)).collect()
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = args
                .into_iter()
                .enumerate()
                .map(|(d, a)| {
                    std::thread::Builder::new()
                        .name(format!("device-{d}"))
                        .stack_size(DEVICE_STACK_BYTES)
                        .spawn_scoped(s, move || run_one(d, a))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => join_helping_rayon(h).unwrap_or_else(|_| {
                        Err(InterpError::Internal("a device thread panicked".into()))
                    }),
                    Err(e) => Err(InterpError::Internal(format!(
                        "cannot start a device thread: {e}"
                    ))),
                })
                .collect()
        })
    };
    // A stop on a limit is the run's error whatever the other devices returned
    // (they were stopped by it).
    if let Some(stop) = budget.stopped() {
        return Err(stop);
    }
    first_error(results)
}

/// All results, or the most telling error: a device's own failure before the
/// collective aborts it caused on the others.
fn first_error(
    results: Vec<Result<Vec<Value>, InterpError>>,
) -> Result<Vec<Vec<Value>>, InterpError> {
    let own = results
        .iter()
        .position(|r| matches!(r, Err(e) if !matches!(e, InterpError::Collective(_))));
    let mut out = Vec::with_capacity(results.len());
    for (d, r) in results.into_iter().enumerate() {
        match r {
            Ok(v) => out.push(v),
            Err(e) if own.is_none_or(|o| o == d) => return Err(e),
            Err(_) => {}
        }
    }
    Ok(out)
}

fn device_count(m: &Module) -> Result<usize, InterpError> {
    let n = m.device_count();
    if !(1..=65536).contains(&n) {
        return Err(InterpError::Unsupported(format!("{n} devices")));
    }
    Ok(n as usize)
}

/// Options of [`run_global`].
#[derive(Clone, Debug)]
pub struct GlobalRun {
    /// Sharding of each output leaf, overriding the root's `sharding=` attribute.
    pub output_shardings: Option<Vec<SingleSharding>>,
    /// Global dims of each output leaf when known (used to drop padding and to
    /// work out the sharding of outputs that carry none).
    pub output_dims: Option<Vec<Vec<usize>>>,
    /// Largest single result an instruction may allocate, in bytes.
    pub max_alloc: u64,
    /// Step budget, deadline and interrupt flag (none by default).
    pub limits: RunLimits,
}

impl Default for GlobalRun {
    fn default() -> Self {
        GlobalRun {
            output_shardings: None,
            output_dims: None,
            max_alloc: u64::MAX,
            limits: RunLimits::default(),
        }
    }
}

/// Runs a module on GLOBAL arrays, as JAX's jit takes them: a partitioned
/// multi-device module gets each argument split across devices by its parameter's
/// sharding, and its results assembled by the output shardings. Single-device and
/// unpartitioned modules (global shapes, `Sharding` annotations) run on one device.
pub fn run_global(
    m: &Module,
    args: Vec<Value>,
    opts: &GlobalRun,
) -> Result<Vec<Value>, InterpError> {
    if crate::manual::has_manual_regions(m) {
        return run_manual(m, args, opts);
    }
    if m.device_count() <= 1 || !sharding::is_partitioned(m) {
        sharding::check_runs_unpartitioned(m)?;
        let mut single = execute_on(m, vec![args], 1, 1, 1, opts.max_alloc, &opts.limits)?;
        return Ok(single.pop().unwrap_or_default());
    }
    let n = device_count(m)?;
    let per_device = split_arguments(m, args, n)?;
    let results = execute_devices_limited(m, per_device, opts.max_alloc, &opts.limits)?;
    assemble_results(m, results, opts)
}

/// How many devices [`run_global`] simulates for `m`: the devices of the module
/// when it is partitioned, the mesh's for Shardy manual regions, else one.
pub fn simulated_devices(m: &Module) -> u64 {
    if crate::manual::has_manual_regions(m) {
        return crate::manual::manual_mesh(m).map_or(1, |mesh| mesh.devices() as u64);
    }
    if m.device_count() > 1 && sharding::is_partitioned(m) {
        return m.device_count() as u64;
    }
    1
}

/// Runs an unpartitioned module with Shardy manual regions on every device of
/// its mesh, each with the global arguments; the results are global on every
/// device after the regions, so device 0's are returned.
fn run_manual(m: &Module, args: Vec<Value>, opts: &GlobalRun) -> Result<Vec<Value>, InterpError> {
    sharding::check_runs_unpartitioned(m)?;
    let n = crate::manual::manual_mesh(m)?.devices();
    if n == 0 || n > 65536 {
        return Err(InterpError::Unsupported(format!("a mesh of {n} devices")));
    }
    let per_device = vec![args; n];
    let mut results = execute_on(m, per_device, 1, n, n, opts.max_alloc, &opts.limits)?;
    results.truncate(1);
    Ok(results.pop().unwrap_or_default())
}

/// Splits each global argument into the shards of every device.
fn split_arguments(m: &Module, args: Vec<Value>, n: usize) -> Result<Vec<Vec<Value>>, InterpError> {
    crate::eval::check_arg_count(m, args.len())?;
    let entry = m.entry();
    let mut per_device: Vec<Vec<Value>> = vec![Vec::with_capacity(args.len()); n];
    for (i, (arg, &p)) in args.into_iter().zip(&entry.params).enumerate() {
        let ins = m.instr(p);
        let Value::Array(global) = arg else {
            return Err(InterpError::Unsupported(format!(
                "tuple-valued parameter {i} on several devices"
            )));
        };
        let shard_shape = ins.shape.as_array().ok_or_else(|| {
            InterpError::Unsupported(format!("tuple-shaped parameter {i} on several devices"))
        })?;
        let shard_dims: Vec<usize> = shard_shape
            .dims
            .iter()
            .map(|&d| d.max(0) as usize)
            .collect();
        let s = sharding::single_of(ins.attr("sharding"), 0)?;
        let map = TileMap::new(&s, shard_dims.len(), n)
            .map_err(|e| InterpError::BadArgument(format!("parameter {i}: {e}")))?;
        if global.ty != shard_shape.ty {
            return Err(InterpError::BadArgument(format!(
                "parameter {i}: expected element type {}, got {}",
                shard_shape.ty, global.ty
            )));
        }
        let shards = map
            .split(&global, &shard_dims)
            .map_err(|e| InterpError::BadArgument(format!("parameter {i}: {e}")))?;
        for (d, sh) in shards.into_iter().enumerate() {
            per_device[d].push(Value::Array(sh));
        }
    }
    Ok(per_device)
}

/// Assembles every output leaf from the devices' shards.
fn assemble_results(
    m: &Module,
    results: Vec<Vec<Value>>,
    opts: &GlobalRun,
) -> Result<Vec<Value>, InterpError> {
    let n = results.len();
    let leaves = results.first().map_or(0, Vec::len);
    let from_root = sharding::root_shardings(m, leaves)?;
    let mut out = Vec::with_capacity(leaves);
    for k in 0..leaves {
        let shards: Vec<&Array> = results
            .iter()
            .map(|r| {
                r.get(k)
                    .ok_or_else(|| InterpError::Internal("missing result".into()))?
                    .as_array()
            })
            .collect::<Result<_, _>>()?;
        let dims_hint = opts
            .output_dims
            .as_ref()
            .and_then(|d| d.get(k))
            .map(Vec::as_slice);
        let given = match (&opts.output_shardings, &from_root) {
            (Some(s), _) => Some(s.get(k).cloned().ok_or_else(|| {
                InterpError::BadArgument(format!("no output sharding given for output {k}"))
            })?),
            (None, Some(r)) => r.get(k).cloned(),
            (None, None) => None,
        };
        let s = match given {
            Some(s) => s,
            None => sharding::infer_output_sharding(&shards, dims_hint).map_err(|why| {
                InterpError::BadArgument(format!(
                    "output {k} has no sharding in the module and {why}; give its sharding (tpusim run --output-sharding)"
                ))
            })?,
        };
        let rank = shards.first().map_or(0, |a| a.dims.len());
        let map = TileMap::new(&s, rank, n)
            .map_err(|e| InterpError::BadArgument(format!("output {k}: {e}")))?;
        let a = map
            .assemble(&shards, dims_hint)
            .map_err(|e| InterpError::BadArgument(format!("output {k}: {e}")))?;
        out.push(Value::Array(a));
    }
    Ok(out)
}

/// The dims of each output leaf of `m`'s entry as written: the global output
/// dims of an unpartitioned module (what [`GlobalRun::output_dims`] takes
/// when its partitioned form runs).
pub fn root_leaf_dims(m: &Module) -> Vec<Vec<usize>> {
    m.instr(m.entry().root)
        .shape
        .leaves()
        .iter()
        .map(|a| a.dims.iter().map(|&d| d.max(0) as usize).collect())
        .collect()
}

/// The global shapes of the entry parameters: for a partitioned module, shard
/// shape × tile count per dim (the largest global shape those shards can hold).
pub fn global_parameter_shapes(m: &Module) -> Result<Vec<Shape>, InterpError> {
    let shapes = m.entry_parameter_shapes();
    if m.device_count() <= 1 || !sharding::is_partitioned(m) {
        return Ok(shapes);
    }
    let n = device_count(m)?;
    m.entry()
        .params
        .iter()
        .zip(shapes)
        .enumerate()
        .map(|(i, (&p, shape))| {
            let Shape::Array(mut a) = shape else {
                return Ok(shape);
            };
            let s = sharding::single_of(m.instr(p).attr("sharding"), 0)?;
            let map = TileMap::new(&s, a.dims.len(), n)
                .map_err(|e| InterpError::BadArgument(format!("parameter {i}: {e}")))?;
            for (d, t) in a.dims.iter_mut().zip(&map.tiles) {
                *d *= *t as i64;
            }
            Ok(Shape::Array(a))
        })
        .collect()
}

/// Joins a device thread. When the caller is itself a rayon worker, it runs
/// pool jobs while it waits: the device threads' kernels queue work on that
/// pool, and a worker that only blocked could leave none to run it (with
/// every worker waiting in here, a deadlock).
fn join_helping_rayon<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> std::thread::Result<T> {
    if rayon::current_thread_index().is_some() {
        while !h.is_finished() {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }
    h.join()
}
