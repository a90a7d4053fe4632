//! Evaluation of computations: walks instructions in text order and dispatches to kernels.

use crate::limits::{Budget, RunLimits};
use crate::value::same_dims;
use crate::value::{check_type, Array, Value};
use crate::{elementwise as ew, fused, more_ops, ops, InterpError};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{CompId, InstrId, Module, OpCategory, Opcode, Shape};

/// Iteration cap for `while` loops.
pub const MAX_LOOP_ITERATIONS: u64 = 100_000_000;

/// Runs the entry computation of a single-device module on `args` and returns the
/// flattened leaves of its result.
pub fn execute(m: &Module, args: Vec<Value>) -> Result<Vec<Value>, InterpError> {
    execute_limited(m, args, &RunLimits::default())
}

/// [`execute`] under `limits`: stops with [`InterpError::Stopped`] when one trips.
pub fn execute_limited(
    m: &Module,
    args: Vec<Value>,
    limits: &RunLimits,
) -> Result<Vec<Value>, InterpError> {
    check_single_device(m)?;
    check_arg_count(m, args.len())?;
    for (i, (&p, a)) in m.entry().params.iter().zip(&args).enumerate() {
        check_value_shape(&m.instr(p).shape, a)
            .map_err(|e| InterpError::BadArgument(format!("parameter {i}: {e}")))?;
    }
    let mut per_device = crate::spmd::execute_on(m, vec![args], 1, 1, 1, u64::MAX, limits)?;
    Ok(per_device.pop().unwrap_or_default())
}

/// Fails unless `given` is the entry computation's parameter count.
pub(crate) fn check_arg_count(m: &Module, given: usize) -> Result<(), InterpError> {
    let want = m.entry().params.len();
    if given != want {
        return Err(InterpError::BadArgument(format!(
            "the entry computation takes {want} parameters, {given} given"
        )));
    }
    Ok(())
}

/// Runs the entry computation on one device's arguments (already checked) and
/// returns the flattened leaves of its result.
pub(crate) fn run_entry(
    m: &Module,
    dev: &crate::spmd::DeviceCtx,
    max_alloc: u64,
    budget: &Budget,
    args: Vec<Value>,
) -> Result<Vec<Value>, InterpError> {
    let args: Vec<Arc<Value>> = args.into_iter().map(Arc::new).collect();
    let fused_copy;
    let m = if m.instrs.iter().any(|i| i.opcode == Opcode::Fusion) {
        m
    } else {
        // Unoptimized HLO: group elementwise chains into fusions (exactly what the
        // instructions compute, nothing reordered) so they run tile by tile.
        let mut copy = m.clone();
        tpusim_hlo::passes::fuse(&mut copy);
        fused_copy = copy;
        &fused_copy
    };
    let interp = Interp {
        m,
        dev,
        max_alloc,
        rng_state: Default::default(),
        budget,
        ticks: Default::default(),
        loops: Default::default(),
        plans: Default::default(),
        constants: Default::default(),
        envs: Default::default(),
        dots: Default::default(),
    };
    let out = interp.run(m.entry, &args)?;
    let mut leaves = Vec::new();
    Arc::unwrap_or_clone(out).into_leaves(&mut leaves);
    Ok(leaves)
}

/// Fails with [`InterpError::MultiDevice`] when the module needs several devices.
pub fn check_single_device(m: &Module) -> Result<(), InterpError> {
    if m.device_count() > 1 {
        return Err(InterpError::MultiDevice(m.device_count()));
    }
    Ok(())
}

pub(crate) fn check_value_shape(shape: &Shape, v: &Value) -> Result<(), String> {
    match (shape, v) {
        (Shape::Array(s), Value::Array(a)) => {
            let dims: Vec<usize> = s.dims.iter().map(|&d| d.max(0) as usize).collect();
            if s.ty != a.ty || !same_dims(&dims, &a.dims) {
                return Err(format!(
                    "expected {}{:?}, got {}{:?}",
                    s.ty, dims, a.ty, a.dims
                ));
            }
            Ok(())
        }
        (Shape::Tuple(ss), Value::Tuple(vs)) if ss.len() == vs.len() => ss
            .iter()
            .zip(vs)
            .try_for_each(|(s, v)| check_value_shape(s, v)),
        _ => Err(format!("value does not match shape {shape}")),
    }
}

pub(crate) fn array_dims(
    shape: &Shape,
) -> Result<(tpusim_hlo::PrimitiveType, Vec<usize>), InterpError> {
    let a = shape
        .as_array()
        .ok_or_else(|| InterpError::Internal(format!("expected an array shape, found {shape}")))?;
    check_type(a.ty)?;
    if a.dims.iter().any(|&d| d < 0) {
        return Err(InterpError::Unsupported("unbounded dynamic shape".into()));
    }
    Ok((a.ty, a.dims.iter().map(|&d| d as usize).collect()))
}

/// A computation's arguments: shared with the caller, or handed over (then
/// each parameter moves its argument into the computation).
enum Args<'a> {
    Borrowed(&'a [Arc<Value>]),
    /// One argument (a loop's state).
    Owned(Option<Arc<Value>>),
}

impl Args<'_> {
    fn len(&self) -> usize {
        match self {
            Args::Borrowed(a) => a.len(),
            Args::Owned(_) => 1,
        }
    }

    fn take(&mut self, n: usize) -> Option<Arc<Value>> {
        match self {
            Args::Borrowed(a) => a.get(n).cloned(),
            Args::Owned(a) if n == 0 => a.take(),
            Args::Owned(_) => None,
        }
    }
}

/// How a computation is evaluated, worked out once per run and reused by every
/// call (a loop body runs it once per iteration).
pub(crate) struct CompPlan {
    /// The instructions evaluated, in text order (a tiled chain's inside skipped).
    steps: Vec<Step>,
    /// Slot of the root.
    root: usize,
    /// Slots: the computation's instructions, then those of the leaf
    /// computations whose calls were spliced in.
    env_len: usize,
}

/// One evaluated instruction. Slots are positions in the computation's
/// instruction list.
struct Step {
    id: InstrId,
    slot: usize,
    /// Slots read (a tiled chain's end reads the chain's inputs), each with
    /// whether this is its last read: then the value is moved out of the
    /// environment instead of shared (never the root's slot), so values nobody
    /// reads any more are freed as soon as possible.
    reads: Vec<(usize, bool)>,
    /// Bytes the result allocates (0 for ops that share their operand's storage).
    bytes: u64,
    kind: StepKind,
    /// The tiled chain a [`StepKind::Tiled`] step evaluates.
    chain: Option<Rc<fused::Plan>>,
}

/// How a step is evaluated: the ops that only move values between slots are
/// done in the loop itself (a loop body is mostly these); the rest by the
/// op's kernel.
#[derive(Clone, Copy)]
enum StepKind {
    /// `parameter(n)`.
    Parameter(usize),
    /// `tuple(...)` of the reads.
    Tuple,
    /// `get-tuple-element(t), index=i`.
    Element(usize),
    /// The end of a tiled elementwise chain.
    Tiled,
    /// `dynamic-update-slice`: in place when the operand is not shared.
    UpdateSlice,
    /// `reshape`: the operand's storage itself when it is not shared.
    Reshape,
    /// Anything else: [`Interp::eval`].
    Kernel,
}

impl StepKind {
    fn of(ins: &tpusim_hlo::Instruction, tiled: bool) -> StepKind {
        if tiled {
            return StepKind::Tiled;
        }
        match ins.opcode {
            Opcode::Parameter => match ins.parameter_number.map(usize::try_from) {
                Some(Ok(n)) => StepKind::Parameter(n),
                _ => StepKind::Kernel,
            },
            Opcode::Tuple => StepKind::Tuple,
            Opcode::GetTupleElement => match ins.attr_int("index").map(usize::try_from) {
                Some(Ok(i)) => StepKind::Element(i),
                _ => StepKind::Kernel,
            },
            Opcode::DynamicUpdateSlice => StepKind::UpdateSlice,
            Opcode::Reshape => StepKind::Reshape,
            _ => StepKind::Kernel,
        }
    }
}

/// Most steps a computation's plan may have once the leaf calls in it are
/// spliced in: this many times its own instructions, plus [`SPLICE_EXTRA`].
const SPLICE_FACTOR: usize = 4;
const SPLICE_EXTRA: usize = 4096;

/// Calls nested this deep inside a spliced callee run as calls: splicing
/// recurses once per level, so the input's call nesting must not drive it.
const MAX_SPLICE_DEPTH: u32 = 8;

impl CompPlan {
    fn new(interp: &Interp, c: CompId) -> CompPlan {
        CompPlan::nested(interp, c, 0)
    }

    /// The plan of `c`, whose calls are spliced if `depth` allows.
    fn nested(interp: &Interp, c: CompId, depth: u32) -> CompPlan {
        let m = interp.m;
        let comp = m.comp(c);
        let tiling = fused::tiling(interp, c);
        let mut slot: HashMap<InstrId, usize> = comp
            .instrs
            .iter()
            .enumerate()
            .map(|(p, &id)| (id, p))
            .collect();
        let mut env_len = comp.instrs.len();
        let mut splice_budget = comp.instrs.len() * SPLICE_FACTOR + SPLICE_EXTRA;
        let mut steps = Vec::with_capacity(comp.instrs.len());
        for (pos, &id) in comp.instrs.iter().enumerate() {
            if tiling.internal.contains(&id) {
                continue;
            }
            let tiled = tiling.plans.contains_key(&id);
            let operands: &[InstrId] = match tiling.plans.get(&id) {
                Some(p) => &p.inputs,
                None => &m.instr(id).operands,
            };
            // An operand from outside the computation has no slot: it reads
            // as undefined, as before.
            let reads: Vec<(usize, bool)> = operands
                .iter()
                .map(|o| (slot.get(o).copied().unwrap_or(usize::MAX), false))
                .collect();
            if !tiled {
                let fits = |callee: CompId| m.comp(callee).instrs.len() <= splice_budget;
                let callee = (depth < MAX_SPLICE_DEPTH)
                    .then(|| interp.leaf_callee(id))
                    .flatten()
                    .filter(|&c| fits(c));
                if let Some(callee) = callee {
                    let sub = CompPlan::nested(interp, callee, depth + 1);
                    if sub.steps.len() <= splice_budget {
                        if let Some(root) = splice(m, &mut steps, &mut env_len, &reads, &sub) {
                            splice_budget -= sub.steps.len();
                            slot.insert(id, root);
                            continue;
                        }
                    }
                }
            }
            steps.push(Step {
                id,
                slot: pos,
                reads,
                bytes: crate::memory::allocation_bytes(m.instr(id)),
                kind: StepKind::of(m.instr(id), tiled),
                chain: tiling.plans.get(&id).cloned(),
            });
        }
        let mut root = slot.get(&comp.root).copied().unwrap_or(usize::MAX);
        forward_tuple_elements(&mut steps, &mut root);
        remove_dead_steps(m, &mut steps, root);
        // The last read of each slot, as (step, position in its reads).
        let mut last_read: HashMap<usize, (usize, usize)> = HashMap::new();
        for (k, st) in steps.iter().enumerate() {
            for (j, &(r, _)) in st.reads.iter().enumerate() {
                last_read.insert(r, (k, j));
            }
        }
        for (r, (k, j)) in last_read {
            if r != root && r != usize::MAX {
                steps[k].reads[j].1 = true;
            }
        }
        CompPlan {
            steps,
            root,
            env_len,
        }
    }
}

/// Reads an element of a tuple built in the same plan straight from the
/// slot of the tuple's operand (XLA's simplifier folds the same pattern):
/// spliced calls return tuples that their callers take apart at once.
fn forward_tuple_elements(steps: &mut Vec<Step>, root: &mut usize) {
    let mut alias: HashMap<usize, usize> = HashMap::new();
    let mut tuples: HashMap<usize, Vec<usize>> = HashMap::new();
    let resolve = |alias: &HashMap<usize, usize>, r: usize| *alias.get(&r).unwrap_or(&r);
    steps.retain_mut(|st| {
        for read in &mut st.reads {
            read.0 = resolve(&alias, read.0);
        }
        match st.kind {
            StepKind::Tuple => {
                tuples.insert(st.slot, st.reads.iter().map(|r| r.0).collect());
                true
            }
            StepKind::Element(i) => {
                let elem = st
                    .reads
                    .first()
                    .and_then(|r| tuples.get(&r.0)?.get(i).copied());
                match elem {
                    Some(e) => {
                        alias.insert(st.slot, e);
                        false
                    }
                    None => true,
                }
            }
            _ => true,
        }
    });
    *root = resolve(&alias, *root);
}

/// Drops steps whose result nobody reads and whose evaluation has no effect
/// beyond it (a loop condition reads one element of the state it is given;
/// a forwarded tuple may be read by no one).
fn remove_dead_steps(m: &Module, steps: &mut Vec<Step>, root: usize) {
    let mut live = vec![false; steps.len()];
    let mut needed: std::collections::HashSet<usize> = std::collections::HashSet::from([root]);
    for (k, st) in steps.iter().enumerate().rev() {
        if needed.contains(&st.slot) || !effect_free(m, st) {
            live[k] = true;
            needed.extend(st.reads.iter().map(|r| r.0));
        }
    }
    let mut k = 0;
    steps.retain(|_| {
        k += 1;
        live[k - 1]
    });
}

/// Whether a step only computes its result: no collective, no state, no
/// nested computation that could hold either, nothing that reports an error
/// a user would miss.
fn effect_free(m: &Module, st: &Step) -> bool {
    match st.kind {
        StepKind::Parameter(_) | StepKind::Tuple | StepKind::Element(_) | StepKind::Tiled => true,
        StepKind::UpdateSlice | StepKind::Reshape => true,
        StepKind::Kernel => {
            let op = m.instr(st.id).opcode;
            matches!(
                op,
                Opcode::Constant | Opcode::Broadcast | Opcode::Reshape | Opcode::Bitcast
            ) || matches!(op.category(), OpCategory::Unary | OpCategory::Binary)
        }
    }
}

/// Splices the plan of a leaf computation called with `operands` into a
/// caller's steps: its parameters become the operands' slots, its other
/// slots are appended to the caller's environment (`env_len`). Returns the
/// slot of its root, or `None`, changing nothing, when its parameters do not
/// match the operands (the call then runs, and reports that, as a call).
fn splice(
    m: &Module,
    steps: &mut Vec<Step>,
    env_len: &mut usize,
    operands: &[(usize, bool)],
    sub: &CompPlan,
) -> Option<usize> {
    let base = *env_len;
    let mut remap: Vec<usize> = (base..base + sub.env_len).collect();
    for st in &sub.steps {
        match st.kind {
            StepKind::Parameter(n) => remap[st.slot] = operands.get(n)?.0,
            _ if m.instr(st.id).opcode == Opcode::Parameter => return None,
            _ => {}
        }
    }
    let root = *remap.get(sub.root)?;
    *env_len += sub.env_len;
    for st in &sub.steps {
        if let StepKind::Parameter(_) = st.kind {
            continue;
        }
        steps.push(Step {
            id: st.id,
            slot: remap[st.slot],
            reads: st
                .reads
                .iter()
                .map(|&(r, _)| (remap.get(r).copied().unwrap_or(usize::MAX), false))
                .collect(),
            bytes: st.bytes,
            kind: st.kind,
            chain: st.chain.clone(),
        });
    }
    Some(root)
}

/// A table by computation or instruction index, each entry made on first
/// use and shared by every later evaluation of the run (a loop body's plan,
/// constants and dots are needed once per iteration).
pub(crate) struct Lazy<T>(std::cell::RefCell<Vec<Option<T>>>);

impl<T> Default for Lazy<T> {
    fn default() -> Self {
        Lazy(Default::default())
    }
}

impl<T: Clone> Lazy<T> {
    fn get_or_try_make<E>(&self, i: usize, make: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        if let Some(Some(v)) = self.0.borrow().get(i) {
            return Ok(v.clone());
        }
        // Made with the table unborrowed: making a plan may need another.
        let v = make()?;
        let mut table = self.0.borrow_mut();
        if table.len() <= i {
            table.resize(i + 1, None);
        }
        table[i] = Some(v.clone());
        Ok(v)
    }

    fn get_or_make(&self, i: usize, make: impl FnOnce() -> T) -> T {
        match self.get_or_try_make(i, || Ok::<T, std::convert::Infallible>(make())) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }
}

pub(crate) struct Interp<'m> {
    pub m: &'m Module,
    /// The simulated device this interpreter runs as (ids, rendezvous).
    pub dev: &'m crate::spmd::DeviceCtx<'m>,
    /// Largest single result, in bytes, an instruction may allocate.
    pub max_alloc: u64,
    /// Counter behind `rng` and `rng-get-and-update-state` (starts at 0 per execution).
    pub rng_state: std::cell::Cell<u128>,
    /// The run's limits, shared with the other devices.
    pub budget: &'m Budget<'m>,
    /// Steps this device has evaluated (paces the clock checks).
    pub ticks: std::cell::Cell<u64>,
    /// The `while` instructions being executed, outermost first (for messages).
    pub loops: std::cell::RefCell<Vec<InstrId>>,
    /// Evaluation plans by computation, built on first use.
    plans: Lazy<Rc<CompPlan>>,
    /// Constants already turned into values: a loop body's constants are
    /// built once, not once per iteration (they are immutable, so shared).
    constants: Lazy<Arc<Value>>,
    /// Dot dimension numbers by instruction, read on first use.
    dots: Lazy<Rc<ops::DotNumbers>>,
    /// Environments of finished evaluations, kept for the next one: a loop
    /// runs its condition and body once per iteration.
    envs: std::cell::RefCell<Vec<Vec<Option<Arc<Value>>>>>,
}

impl<'m> Interp<'m> {
    /// Evaluates computation `c` with parameters `args`.
    pub fn run(&self, c: CompId, args: &[Arc<Value>]) -> Result<Arc<Value>, InterpError> {
        self.run_args(c, Args::Borrowed(args))
    }

    /// [`Interp::run`] of a one-parameter computation on an argument it owns:
    /// a value only it holds can be updated in place (a loop's state, handed
    /// from one iteration to the next).
    fn run_owned(&self, c: CompId, arg: Arc<Value>) -> Result<Arc<Value>, InterpError> {
        self.run_args(c, Args::Owned(Some(arg)))
    }

    fn run_args(&self, c: CompId, mut args: Args) -> Result<Arc<Value>, InterpError> {
        let comp = self.m.comp(c);
        if args.len() != comp.params.len() {
            return Err(InterpError::Internal(format!(
                "computation '{}' takes {} parameters, {} given",
                comp.name,
                comp.params.len(),
                args.len()
            )));
        }
        let plan = self.comp_plan(c);
        let mut env = self.envs.borrow_mut().pop().unwrap_or_default();
        env.resize(plan.env_len, None);
        let out = self.run_plan(c, &plan, &mut args, &mut env);
        env.clear();
        self.envs.borrow_mut().push(env);
        out
    }

    /// Runs `plan`, the plan of computation `c`, in `env` (all empty slots).
    fn run_plan(
        &self,
        c: CompId,
        plan: &CompPlan,
        args: &mut Args,
        env: &mut [Option<Arc<Value>>],
    ) -> Result<Arc<Value>, InterpError> {
        let comp = self.m.comp(c);
        let mut inputs: Vec<Arc<Value>> = Vec::new();
        for st in &plan.steps {
            self.step(c)?;
            inputs.clear();
            for &(r, last) in &st.reads {
                let v = match env.get_mut(r) {
                    Some(slot) if last => slot.take(),
                    Some(slot) => slot.clone(),
                    None => None,
                };
                let v = v.ok_or_else(|| {
                    InterpError::Internal(format!(
                        "operand of '{}' used before definition",
                        self.m.instr(st.id).name
                    ))
                })?;
                inputs.push(v);
            }
            if st.bytes > self.max_alloc {
                crate::memory::check_allocation(self.m.instr(st.id), self.max_alloc)?;
            }
            let v = match st.kind {
                StepKind::Parameter(n) => args.take(n).ok_or_else(|| {
                    InterpError::Internal(format!("parameter {n} is missing or read twice"))
                })?,
                StepKind::Tuple => Arc::new(Value::Tuple(std::mem::take(&mut inputs))),
                StepKind::Element(i) => match inputs.first().map(|t| &**t) {
                    Some(Value::Tuple(t)) if i < t.len() => t[i].clone(),
                    _ => self.instr_value(st.id, &inputs)?,
                },
                StepKind::Tiled => {
                    let fp = st
                        .chain
                        .as_deref()
                        .ok_or_else(|| InterpError::Internal("tiled chain without plan".into()))?;
                    fused::eval_plan(fp, &inputs)?
                }
                StepKind::UpdateSlice => match ops::update_slice_in_place(&mut inputs)
                    .map_err(|e| e.at(&self.m.instr(st.id).name))?
                {
                    Some(v) => v,
                    None => self.instr_value(st.id, &inputs)?,
                },
                StepKind::Reshape => match ops::reshape_in_place(self.m.instr(st.id), &mut inputs)
                    .map_err(|e| e.at(&self.m.instr(st.id).name))?
                {
                    Some(v) => v,
                    None => self.instr_value(st.id, &inputs)?,
                },
                _ => self.instr_value(st.id, &inputs)?,
            };
            inputs.clear();
            env[st.slot] = Some(v);
        }
        env.get_mut(plan.root)
            .and_then(Option::take)
            .ok_or_else(|| InterpError::Internal(format!("root of '{}' not evaluated", comp.name)))
    }

    /// The computation a `call` or `fusion` runs when it is a leaf (nothing in
    /// it loops, branches or runs asynchronously; its own calls are spliced
    /// in turn or run as calls) small enough to splice into the caller's
    /// plan: running its instructions in the caller's loop saves a nested
    /// evaluation per call (a scan's body calls several per iteration).
    fn leaf_callee(&self, id: InstrId) -> Option<CompId> {
        let ins = self.m.instr(id);
        let attr = match ins.opcode {
            Opcode::Call => "to_apply",
            Opcode::Fusion => "calls",
            _ => return None,
        };
        let callee = ins.attr_comp(attr)?;
        let comp = self.m.comp(callee);
        let leaf = comp.params.len() == ins.operands.len()
            && comp.instrs.len() <= SPLICE_EXTRA
            && comp.instrs.iter().all(|&i| {
                let op = self.m.instr(i).opcode;
                !matches!(
                    op,
                    Opcode::While
                        | Opcode::Conditional
                        | Opcode::AsyncStart
                        | Opcode::AsyncUpdate
                        | Opcode::AsyncDone
                )
            });
        leaf.then_some(callee)
    }

    /// The dimension numbers of dot `id`, read from its attributes on first use.
    pub(crate) fn dot_numbers(&self, id: InstrId) -> Rc<ops::DotNumbers> {
        self.dots.get_or_make(id.index(), || {
            Rc::new(ops::DotNumbers::of(self.m.instr(id)))
        })
    }

    /// The evaluation plan of computation `c`, built on first use.
    fn comp_plan(&self, c: CompId) -> Rc<CompPlan> {
        self.plans
            .get_or_make(c.index(), || Rc::new(CompPlan::new(self, c)))
    }

    /// Counts one step against the run's limits; stops the run (and, through the
    /// rendezvous, every device waiting at a collective) when one trips.
    fn step(&self, c: CompId) -> Result<(), InterpError> {
        let Some(reason) = self.budget.tick(&self.ticks) else {
            return Ok(());
        };
        let innermost = self.loops.borrow().last().copied();
        let (loop_name, computation) = match innermost {
            Some(w) => {
                let ins = self.m.instr(w);
                (Some(ins.name.clone()), &self.m.comp(ins.parent).name)
            }
            None => (None, &self.m.comp(c).name),
        };
        let err = self.budget.trip(reason, loop_name, computation);
        self.dev.rendezvous.abort(&err.to_string());
        Err(err)
    }

    /// The value of instruction `id`: its op applied to `ops`, errors located at it.
    fn instr_value(&self, id: InstrId, ops: &[Arc<Value>]) -> Result<Arc<Value>, InterpError> {
        let ins = self.m.instr(id);
        if ins.opcode == Opcode::Parameter {
            // A parameter with a usable number is a `StepKind::Parameter` step.
            let n = ins.parameter_number.unwrap_or(-1);
            return Err(InterpError::Internal(format!("bad parameter number {n}")));
        }
        self.eval(id, ops).map_err(|e| e.at(&ins.name))
    }

    fn comp_attr(&self, id: InstrId, name: &str) -> Result<CompId, InterpError> {
        self.m
            .instr(id)
            .attr_comp(name)
            .ok_or_else(|| InterpError::Internal(format!("missing attribute {name}")))
    }

    fn eval(&self, id: InstrId, ops: &[Arc<Value>]) -> Result<Arc<Value>, InterpError> {
        let ins = self.m.instr(id);
        let arr = |i: usize| -> Result<&Array, InterpError> {
            ops.get(i)
                .ok_or_else(|| InterpError::Internal(format!("missing operand {i}")))?
                .as_array()
        };
        let wrap = |a: Array| Ok(Arc::new(Value::Array(a)));
        match ins.opcode {
            Opcode::Constant => match &ins.literal {
                Some(Literal::Elided) => Err(InterpError::ElidedConstant(ins.name.clone())),
                Some(lit) => self
                    .constants
                    .get_or_try_make(id.index(), || literal_value(lit, &ins.shape).map(Arc::new)),
                None => Err(InterpError::Internal("constant without literal".into())),
            },
            Opcode::Tuple => Ok(Arc::new(Value::Tuple(ops.to_vec()))),
            Opcode::GetTupleElement => {
                let idx = ins.attr_int("index").unwrap_or(0) as usize;
                match &*ops[0] {
                    Value::Tuple(t) => t.get(idx).cloned().ok_or_else(|| {
                        InterpError::Internal(format!("tuple index {idx} out of range"))
                    }),
                    Value::Array(_) => Err(InterpError::Internal(
                        "get-tuple-element of an array".into(),
                    )),
                }
            }
            Opcode::Copy | Opcode::OptBarrier | Opcode::Domain | Opcode::AddDependency => {
                Ok(ops[0].clone())
            }
            Opcode::Call => self.run(self.comp_attr(id, "to_apply")?, ops),
            Opcode::Fusion => self.run(self.comp_attr(id, "calls")?, ops),
            Opcode::While => {
                let cond = self.comp_attr(id, "condition")?;
                let body = self.comp_attr(id, "body")?;
                self.loops.borrow_mut().push(id);
                let out = self.run_while(id, cond, body, ops[0].clone());
                self.loops.borrow_mut().pop();
                out
            }
            Opcode::Conditional => {
                let sel = arr(0)?;
                let branches: Vec<CompId> = match ins.attr("branch_computations") {
                    Some(tpusim_hlo::AttrValue::Comps(cs)) => cs.clone(),
                    _ => vec![
                        self.comp_attr(id, "true_computation")?,
                        self.comp_attr(id, "false_computation")?,
                    ],
                };
                let k = if sel.ty == tpusim_hlo::PrimitiveType::Pred {
                    // pred: true -> branch 0 (true_computation), false -> branch 1.
                    if sel.scalar_i64()? != 0 {
                        0
                    } else {
                        1
                    }
                } else {
                    let i = sel.scalar_i64()?;
                    if i < 0 || i as usize >= branches.len() {
                        branches.len() - 1
                    } else {
                        i as usize
                    }
                };
                let operand = ops
                    .get(k + 1)
                    .cloned()
                    .ok_or_else(|| InterpError::Internal("missing branch operand".into()))?;
                self.run(branches[k], &[operand])
            }
            Opcode::CustomCall if crate::manual::is_boundary(ins) => {
                crate::manual::eval(self, id, ops)
            }
            Opcode::CustomCall => {
                let target = ins.attr_ident("custom_call_target").unwrap_or("");
                let identity = matches!(
                    target,
                    "Sharding"
                        | "SPMDFullToShardShape"
                        | "SPMDShardToFullShape"
                        | "annotate_device_placement"
                        | "MoveToHost"
                        | "MoveToDevice"
                ) || target.starts_with("xla.sdy.");
                if identity && ops.len() == 1 {
                    Ok(ops[0].clone())
                } else if crate::lapack::is_linalg_target(target) {
                    crate::lapack::call(self, id, target, ops)
                } else if target == "TopK" {
                    crate::index_ops::topk_custom_call(self, id, ops).map(Arc::new)
                } else {
                    Err(InterpError::Unsupported(format!(
                        "custom-call target '{target}'"
                    )))
                }
            }
            Opcode::Reduce | Opcode::ReduceWindow => {
                let inputs: Vec<&Array> =
                    ops.iter().map(|v| v.as_array()).collect::<Result<_, _>>()?;
                let to_apply = self.comp_attr(id, "to_apply")?;
                let outs = if ins.opcode == Opcode::Reduce {
                    let dims = ins.attr_ints("dimensions").unwrap_or(&[]);
                    ops::reduce(self, &inputs, dims, to_apply)?
                } else {
                    let Some(tpusim_hlo::AttrValue::Window(w)) = ins.attr("window") else {
                        return Err(InterpError::Internal("reduce-window without window".into()));
                    };
                    let out_dims = match &ins.shape {
                        Shape::Tuple(t) => t.first().map(array_dims).transpose()?.map(|x| x.1),
                        s => Some(array_dims(s)?.1),
                    }
                    .ok_or_else(|| InterpError::Internal("empty reduce-window result".into()))?;
                    ops::reduce_window(self, &inputs, w, out_dims, to_apply)?
                };
                if ins.shape.is_tuple() {
                    Ok(Arc::new(Value::tuple(
                        outs.into_iter().map(Value::Array).collect(),
                    )))
                } else {
                    outs.into_iter()
                        .next()
                        .map(|a| Arc::new(Value::Array(a)))
                        .ok_or_else(|| InterpError::Internal("reduce without result".into()))
                }
            }
            op if crate::collectives::handles(op) => crate::collectives::eval(self, id, ops),
            op if crate::index_ops::handles(op) => {
                crate::index_ops::eval(self, id, ops).map(Arc::new)
            }
            op if more_ops::is_tuple_op(op) => more_ops::tuple_op(self, id, ops),
            op => {
                if ins.shape.is_tuple() {
                    return Err(InterpError::Unsupported(format!("opcode '{}'", op.name())));
                }
                let (ty, dims) = array_dims(&ins.shape)?;
                let a = match op.category() {
                    OpCategory::Unary if op != Opcode::Convert && op != Opcode::ReducePrecision => {
                        ew::unary(op, arr(0)?, ty)?
                    }
                    OpCategory::Binary if op != Opcode::StochasticConvert => ew::binary(
                        op,
                        arr(0)?,
                        arr(1)?,
                        ty,
                        ins.attr_ident("direction"),
                        ins.attr_ident("type"),
                    )?,
                    _ => ops::array_op(self, id, ty, dims, ops)?,
                };
                wrap(a)
            }
        }
    }
}

impl Interp<'_> {
    /// Runs `while` instruction `id` from `state` until `cond` is false.
    fn run_while(
        &self,
        id: InstrId,
        cond: CompId,
        body: CompId,
        mut state: Arc<Value>,
    ) -> Result<Arc<Value>, InterpError> {
        let mut n = 0u64;
        loop {
            let c = self.run(cond, std::slice::from_ref(&state))?;
            if c.as_array()?.scalar_i64()? == 0 {
                return Ok(state);
            }
            n += 1;
            if n > MAX_LOOP_ITERATIONS {
                return Err(InterpError::LoopLimit(
                    self.m.instr(id).name.clone(),
                    MAX_LOOP_ITERATIONS,
                ));
            }
            state = self.run_owned(body, state)?;
        }
    }
}

fn literal_value(lit: &Literal, shape: &Shape) -> Result<Value, InterpError> {
    match (lit, shape) {
        (Literal::Tuple(ls), Shape::Tuple(ss)) => Ok(Value::tuple(
            ls.iter()
                .zip(ss)
                .map(|(l, s)| literal_value(l, s))
                .collect::<Result<_, _>>()?,
        )),
        (Literal::Array(d), Shape::Array(_)) => {
            let (ty, dims) = array_dims(shape)?;
            let n: usize = dims.iter().product();
            let a = match d {
                LiteralData::Pred(v) => {
                    Array::from_i64s(ty, dims, &v.iter().map(|&b| b as i64).collect::<Vec<_>>())
                }
                LiteralData::Int(v) => Array::from_i64s(ty, dims, v),
                LiteralData::Float(v) => Array::from_f64s(ty, dims, v),
                LiteralData::Complex(v) => {
                    let data = match ty {
                        tpusim_hlo::PrimitiveType::C64 => {
                            crate::Data::C64(v.iter().map(|&(r, i)| (r as f32, i as f32)).collect())
                        }
                        tpusim_hlo::PrimitiveType::C128 => crate::Data::C128(v.clone()),
                        _ => return Err(InterpError::Unsupported(format!("element type '{ty}'"))),
                    };
                    Array::new(ty, dims, data)
                }
                LiteralData::Token => return Err(InterpError::Unsupported("token values".into())),
            };
            if a.len() != n {
                // A scalar written as one value for a whole array is not valid HLO.
                return Err(InterpError::Internal(format!(
                    "literal has {} elements, shape needs {n}",
                    a.len()
                )));
            }
            Ok(Value::Array(a))
        }
        _ => Err(InterpError::Internal(
            "literal does not match its shape".into(),
        )),
    }
}
