//! tpusim-spmd: the SPMD partitioner. It turns an unpartitioned HLO module with
//! sharding annotations (what `jax.jit(...).lower(...)` gives, for any mesh) into
//! the per-device module XLA's SPMD partitioner produces: per-device shapes,
//! collectives with replica groups and channel ids, `num_partitions=N`.
//!
//! Shardings are read from `sharding=` attributes, `Sharding` custom calls and
//! the Shardy mesh (`xla.sdy.meshes`), or from XLA's own propagation (every op
//! annotated, shard_map bodies `{manual}`); values without one get theirs from
//! a propagation pass run first, both ways along each op's factors as Shardy
//! does (`propagate`; or, on request, forward during the walk); every op is
//! then emitted on per-device shapes after resharding its operands, an op
//! with a given sharding as XLA's handlers partition it (see `partition` and
//! `build`).
//!
//! This crate must never print, never panic on any input, never return a
//! module that is silently left unpartitioned (unsupported ops are errors), and
//! never depend on the interpreter, the performance model, the CLI or Python.

mod build;
mod halo;
pub mod mesh;
mod partition;
mod propagate;
mod summary;

pub use summary::{summarize, Collective, Summary};

use build::Out;
use mesh::{Mesh, Sh};
use partition::Partitioner;
use tpusim_hlo::attr::{FrontendValue, Sharding, SingleSharding};

use tpusim_hlo::{AttrValue, CompId, Module, Opcode};

/// What the partitioner was asked for.
#[derive(Clone, Debug, Default)]
pub struct PartitionOptions {
    /// Devices to partition for. `None`: the module's `num_partitions`, else the
    /// size of its Shardy mesh, else the largest tile assignment's device count.
    pub num_devices: Option<u32>,
    /// Set to stop partitioning at the next instruction ([`SpmdError::Cancelled`]).
    pub cancel: tpusim_hlo::Cancel,
    /// How values without a sharding get one.
    pub propagation: Propagation,
}

/// How the partitioner gives values without a sharding one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// A pass of its own first, carried both ways along each op's factors
    /// in Shardy's stages (see `propagate`); the partitioner then
    /// partitions the shardings it gives, as XLA partitions Shardy's.
    #[default]
    Factors,
    /// During the partitioning walk: each value takes what its operands
    /// imply, with XLA's backward steps where they matter (loop carries,
    /// broadcasts, partial sums asked for a tiling). Where an unconstrained
    /// embedding lookup's table and tokens claim one mesh axis it keeps the
    /// tokens' tiling, where XLA does not, and notes it.
    Forward,
}

/// Why a module could not be partitioned. Every variant names the instruction
/// (and the sharding) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpmdError {
    #[error("instruction '{instr}': sharding {sharding} has {tiles} tiles, but the module is partitioned for {devices} devices")]
    TileCount {
        instr: String,
        sharding: String,
        tiles: i64,
        devices: u32,
    },
    #[error("instruction '{instr}': sharding {sharding}: {why}")]
    BadSharding {
        instr: String,
        sharding: String,
        why: String,
    },
    #[error("instruction '{instr}': mesh axis '{axis}' in sharding {sharding} is not an axis of the mesh ({mesh})")]
    UnknownAxis {
        instr: String,
        axis: String,
        sharding: String,
        mesh: String,
    },
    #[error("instruction '{instr}': conflicting manual regions: {why}")]
    ConflictingManual { instr: String, why: String },
    #[error("instruction '{instr}' ({opcode}) cannot be partitioned: {why}")]
    Unsupported {
        instr: String,
        opcode: String,
        why: String,
    },
    #[error("the module's mesh is unusable: {0}")]
    Mesh(String),
    #[error("internal partitioner error: {0}")]
    Internal(String),
    /// `PartitionOptions::cancel` was set (Ctrl-C).
    #[error(transparent)]
    Cancelled(#[from] tpusim_hlo::Cancelled),
}

/// The Shardy mesh declared in the module header, as named axes.
fn sdy_mesh(m: &Module) -> Result<Option<Vec<(String, u32)>>, SpmdError> {
    let Some(text) = tpusim_hlo::sdy::meshes_text(m) else {
        return Ok(None);
    };
    let meshes = tpusim_hlo::sdy::parse_meshes(text).map_err(SpmdError::Mesh)?;
    let mut used = meshes.iter().filter(|x| !x.axes.is_empty());
    let Some(mesh) = used.next() else {
        return Ok(None);
    };
    if used.next().is_some() {
        return Err(SpmdError::Mesh(format!(
            "several meshes in one module: {text}"
        )));
    }
    if let Some(ids) = &mesh.device_ids {
        if ids.iter().enumerate().any(|(k, &d)| d != k as i64) {
            return Err(SpmdError::Mesh(format!(
                "meshes with a non-iota device order are not supported: {text}"
            )));
        }
    }
    mesh.axes
        .iter()
        .map(|(n, s)| {
            u32::try_from(*s)
                .ok()
                .filter(|&s| s >= 1)
                .map(|s| (n.clone(), s))
                .ok_or_else(|| SpmdError::Mesh(format!("axis '{n}' of size {s}")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn largest_tiling(m: &Module) -> u32 {
    let mut n = 1i64;
    for i in &m.instrs {
        let singles: Vec<&tpusim_hlo::attr::SingleSharding> = match i.sharding() {
            Some(Sharding::Single(s)) => vec![s],
            Some(Sharding::Tuple(t)) => t.iter().collect(),
            None => continue,
        };
        for s in singles {
            if let tpusim_hlo::attr::ShardingKind::Tiled(ta) = &s.kind {
                n = n.max(ta.dims.iter().product());
            }
        }
    }
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Whether an op other than a parameter or a computation's root carries a
/// sharding over more than one device: XLA's module after sharding
/// propagation (every op annotated, global shapes, `num_partitions=N`). The
/// SPMD partitioner's output keeps shardings on parameters and roots only.
fn annotated_intermediates(m: &Module) -> bool {
    let roots: rustc_hash::FxHashSet<_> = m.comps.iter().map(|c| c.root).collect();
    m.instrs.iter().enumerate().any(|(k, i)| {
        i.parameter_number.is_none()
            && !roots.contains(&tpusim_hlo::InstrId(k as u32))
            && match i.sharding() {
                Some(Sharding::Single(s)) => spans_devices(s),
                Some(Sharding::Tuple(t)) => t.iter().any(spans_devices),
                None => false,
            }
    })
}

/// A sharding over more than one device: tiled into several tiles, or manual.
fn spans_devices(s: &SingleSharding) -> bool {
    use tpusim_hlo::attr::ShardingKind::{Manual, Tiled};
    match &s.kind {
        Tiled(ta) => ta.dims.iter().product::<i64>() > 1,
        Manual => true,
        _ => false,
    }
}

/// Whether `m` is an unpartitioned program that carries sharding annotations
/// for more than one device (a Shardy mesh or tiled shardings without
/// `num_partitions`, GSPMD's `Sharding` custom calls, or XLA's propagated
/// form: shardings on intermediate ops and no collectives).
pub fn needs_partitioning(m: &Module) -> bool {
    let mesh_devices = match sdy_mesh(m) {
        Ok(Some(axes)) => axes.iter().map(|a| u64::from(a.1)).product::<u64>(),
        _ => 1,
    };
    let has_marker = m.instrs.iter().any(|i| {
        i.opcode == Opcode::CustomCall
            && matches!(
                i.attr_ident("custom_call_target"),
                Some("Sharding" | "SPMDFullToShardShape" | "SPMDShardToFullShape")
            )
    });
    // A module that already holds collectives was partitioned (some dumps drop
    // `num_partitions`); its shardings describe its global arrays, not work to do.
    let has_collectives = m
        .instrs
        .iter()
        .any(|i| i.opcode.category() == tpusim_hlo::OpCategory::Collective);
    let unpartitioned_tiling =
        m.config.num_partitions.unwrap_or(1) <= 1 && !has_collectives && largest_tiling(m) > 1;
    let propagated = !has_collectives && annotated_intermediates(m);
    mesh_devices > 1 || has_marker || unpartitioned_tiling || propagated
}

/// The mesh (named axes) `m` is partitioned over.
pub fn mesh_of(m: &Module, options: &PartitionOptions) -> Result<Vec<(String, u32)>, SpmdError> {
    let sdy = sdy_mesh(m)?.filter(|a| !a.is_empty());
    // In u64 and saturating: two axes of 65536 overflow a u32 product; any
    // mesh over 2^16 devices is refused below.
    let sdy_n = sdy.as_ref().map(|a| {
        let n = a.iter().fold(1u64, |n, x| n.saturating_mul(u64::from(x.1)));
        u32::try_from(n).unwrap_or(u32::MAX)
    });
    let n = options
        .num_devices
        .or_else(|| m.config.num_partitions.filter(|&p| p > 1).map(|p| p as u32))
        .or(sdy_n)
        .unwrap_or_else(|| largest_tiling(m));
    if n == 0 || n > 1 << 16 {
        return Err(SpmdError::Mesh(format!("{n} devices")));
    }
    match sdy {
        Some(axes) if sdy_n == Some(n) => Ok(axes),
        Some(axes) => Err(SpmdError::Mesh(format!(
            "{n} devices asked for, but the module's Shardy mesh ({}) has {}",
            axes.iter()
                .map(|(a, s)| format!("{a}={s}"))
                .collect::<Vec<_>>()
                .join(" x "),
            sdy_n.unwrap_or(1)
        ))),
        None => Ok(vec![("devices".to_string(), n)]),
    }
}

/// The logical mesh the devices of `m` are numbered by (axis sizes, major
/// first): the Shardy mesh's axes, or else the axes the module's iota tile
/// assignments split the devices into ([`gspmd_segments`]); `[n]` when they
/// say nothing. Device placement uses it (a JAX mesh's axes are laid on the
/// torus one by one).
pub fn mesh_shape(m: &Module, options: &PartitionOptions) -> Result<Vec<u32>, SpmdError> {
    let named = mesh_of(m, options)?;
    Ok(shape_of(m, &named, has_sdy_mesh(m)?))
}

/// [`mesh_shape`] from the module's named mesh ([`mesh_of`]), and whether
/// that is a Shardy mesh.
fn shape_of(m: &Module, named: &[(String, u32)], sdy: bool) -> Vec<u32> {
    if sdy {
        return named.iter().map(|a| a.1).collect();
    }
    let n: u32 = named.iter().map(|a| a.1).product();
    gspmd_segments(m, n).unwrap_or_else(|| vec![n])
}

fn has_sdy_mesh(m: &Module) -> Result<bool, SpmdError> {
    Ok(sdy_mesh(m)?.is_some_and(|a| !a.is_empty()))
}

/// Checks that every Shardy axis named on an instruction exists in the mesh.
fn check_axis_names(m: &Module, mesh: &[(String, u32)]) -> Result<(), SpmdError> {
    if sdy_mesh(m)?.is_none() {
        return Ok(());
    }
    for ins in &m.instrs {
        let Some(AttrValue::FrontendAttrs(kv)) = ins.attr("frontend_attributes") else {
            continue;
        };
        for (k, v) in kv {
            if !k.starts_with("xla.sdy.sharding") {
                continue;
            }
            let text = match v {
                FrontendValue::Str(s) | FrontendValue::Raw(s) => s,
            };
            let parts: Vec<&str> = text.split('"').collect();
            for name in parts.iter().skip(1).step_by(2) {
                let name = name.trim_end_matches('\\');
                if !name.is_empty() && !mesh.iter().any(|(a, _)| a == name) {
                    return Err(SpmdError::UnknownAxis {
                        instr: ins.name.clone(),
                        axis: name.to_string(),
                        sharding: text.clone(),
                        mesh: mesh
                            .iter()
                            .map(|(a, s)| format!("{a}={s}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Most partitioning rounds (see `partition`): the first and two that carry
/// the tilings later ops asked for back into loops, scatters and dots.
const MAX_ROUNDS: usize = 3;

/// A module ready for pricing, and what partitioning it involved.
pub struct ForPricing {
    /// The per-device module (the input itself when it needed no partitioning).
    pub module: Module,
    /// The assumption lines the analyses report, when it was partitioned:
    /// that it was, and where its propagation may part from XLA's.
    pub notes: Vec<String>,
    /// The logical mesh its device ids number ([`mesh_shape`]), when it was
    /// partitioned.
    pub mesh: Option<Vec<u32>>,
}

/// Partitions `module` when it [`needs_partitioning`], with the assumption
/// line and mesh shape the CLI and the Python package report; any other module
/// comes back as it is.
pub fn partition_for_pricing(
    module: Module,
    options: &PartitionOptions,
) -> Result<ForPricing, SpmdError> {
    if !needs_partitioning(&module) {
        return Ok(ForPricing {
            module,
            notes: Vec::new(),
            mesh: None,
        });
    }
    let named = mesh_of(&module, options)?;
    let sdy = has_sdy_mesh(&module)?;
    let mesh = shape_of(&module, &named, sdy);
    let (partitioned, conflicts) = partition_noting_conflicts(&module, options)?;
    let devices: u32 = named.iter().map(|a| a.1).product();
    let mesh_text = if sdy {
        let axes: Vec<String> = named.iter().map(|(n, s)| format!("{n}={s}")).collect();
        format!("mesh {}", axes.join(" x "))
    } else {
        let sizes: Vec<String> = mesh.iter().map(u32::to_string).collect();
        format!(
            "device mesh {}, read from the shardings' device lists",
            sizes.join("x")
        )
    };
    let how = match options.propagation {
        Propagation::Factors => {
            "shardings propagated both ways along each op's factors, as Shardy does"
        }
        Propagation::Forward => "shardings propagated forward (--propagation forward)",
    };
    let mut notes = vec![format!(
        "partitioned by tpusim's SPMD partitioner for {devices} devices ({mesh_text}; {how})"
    )];
    notes.extend(conflict_note(&conflicts));
    Ok(ForPricing {
        module: partitioned,
        notes,
        mesh: Some(mesh),
    })
}

/// Partitions an unpartitioned sharded module into the per-device module for
/// `options.num_devices` (or the module's own device count). The result is
/// verified and carries the original parameter and result shardings.
pub fn partition(module: &Module, options: &PartitionOptions) -> Result<Module, SpmdError> {
    partition_noting_conflicts(module, options).map(|(m, _)| m)
}

/// The assumption line for gathers whose operand and indices tile two dims
/// of an unconstrained result over one mesh axis (`(op, axis)` pairs), if any.
fn conflict_note(conflicts: &[(String, String)]) -> Option<String> {
    let ((op, axis), rest) = conflicts.split_first()?;
    let others = match rest.len() {
        0 => String::new(),
        n => format!(" and {n} more op(s)"),
    };
    Some(format!(
        "{op}{others}: the gathered operand (an embedding table) and the indices tile two \
         different dims of the result over mesh axis '{axis}' and nothing constrains the \
         result; tpusim keeps the indices' (batch) tiling, XLA's Shardy propagation drops \
         both and the result takes what later ops ask (FSDP weights: their embed tiling, \
         the batch replicated on every device, many times the communication and memory \
         predicted here); constrain the activations with jax.lax.with_sharding_constraint, \
         as MaxText does, or price XLA's own propagation: compile on fake CPU devices with \
         XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_pass_re=shardy-xla' and analyze the \
         *after_shardy-xla.before_spmd-partitioning.txt dump, which tpusim partitions too"
    ))
}

/// [`partition`], also returning the ops where its propagation may part from
/// Shardy's (see [`partition::Partitioner::conflicts`]).
pub fn partition_noting_conflicts(
    module: &Module,
    options: &PartitionOptions,
) -> Result<(Module, Vec<(String, String)>), SpmdError> {
    let named = mesh_of(module, options)?;
    check_axis_names(module, &named)?;
    let mesh = mesh_for(module, named);
    let n = mesh.n;
    let propagated;
    let (module, given) = match options.propagation {
        // Calls are inlined first, as XLA's CallInliner does before its
        // partitioner runs (shard_map bodies aside).
        Propagation::Forward => {
            propagated = propagate::inlined(module);
            (&propagated, std::rc::Rc::default())
        }
        Propagation::Factors => {
            let p = propagate::propagate(module, &mesh)?;
            propagated = p.module;
            (&propagated, std::rc::Rc::new(p.given))
        }
    };
    // Round one propagates forward; what the ops after a loop ask of its
    // untiled results is carried into the loop in round two (XLA's backward
    // propagation through `while`: a scan's stacked gradients take the
    // tiling the optimizer gives them), and what the ops after a scatter ask
    // of its rows tiles them (an embedding's gradient takes the table's).
    // A tiling taken in one round can ask a new one of a value before it (a
    // loop's stacked gradient, once tiled, asks its update's partial sums
    // for that tiling): a few rounds, each adding what the previous asked.
    let mut hints: rustc_hash::FxHashMap<_, _> = Default::default();
    let mut round = 0;
    let (p, new_entry, root_sh) = loop {
        round += 1;
        let mut p = Partitioner::new(module, Out::new(module, mesh.clone()));
        p.cancel = options.cancel.clone();
        p.loop_hints = hints.clone();
        p.given = std::rc::Rc::clone(&given);
        let params = entry_shardings(&p, module)?;
        let (new_entry, root_sh) = p.computation(module.entry, &params, None)?;
        let fresh: Vec<_> = p
            .wanted_after_loop
            .iter()
            .filter(|(k, _)| !hints.contains_key(*k))
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        if fresh.is_empty() || round == MAX_ROUNDS {
            break (p, new_entry, root_sh);
        }
        hints.extend(fresh);
    };
    options.cancel.check()?;
    let mut conflicts = p.conflicts;
    conflicts.dedup();
    let mut out = p.out.m;
    finish_module(&mut out, module.entry, new_entry, &root_sh, &mesh, n)?;
    // Constants copied per use for propagation are one again where their
    // tilings agree (XLA's CSE after partitioning).
    tpusim_hlo::passes::merge_constant_copies(&mut out);
    // Values resharded by redoing their producer leave the original unused,
    // as XLA's partitioner runs DCE on its result.
    tpusim_hlo::passes::remove_dead_code_and_collectives(&mut out);
    let text = tpusim_hlo::print_module(&out);
    let parsed = tpusim_hlo::parse_module(&text).map_err(|e| {
        SpmdError::Internal(format!(
            "the partitioned module does not parse: {}",
            e.render("partitioned", &text)
        ))
    })?;
    tpusim_hlo::verify(&parsed).map_err(|errs| {
        SpmdError::Internal(format!(
            "the partitioned module does not verify: {}",
            errs.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    })?;
    Ok((parsed, conflicts))
}

/// `module` with the sharding tpusim's factor propagation gives every value
/// written as its `sharding=` (calls inlined): what the partitioner
/// partitions under [`Propagation::Factors`].
pub fn propagate_shardings(
    module: &Module,
    options: &PartitionOptions,
) -> Result<Module, SpmdError> {
    let named = mesh_of(module, options)?;
    check_axis_names(module, &named)?;
    let mesh = mesh_for(module, named);
    let mut p = propagate::propagate(module, &mesh)?;
    propagate::write_shardings(&mut p.module, &p.given, &mesh);
    Ok(p.module)
}

/// The mesh of factor axes: named axes as declared; a single unnamed axis
/// (GSPMD-style modules) split where the module's tile assignments need it.
fn mesh_for(module: &Module, named: Vec<(String, u32)>) -> Mesh {
    let sdy = tpusim_hlo::sdy::meshes_text(module).is_some();
    if named.len() != 1 || sdy {
        return Mesh::new(named);
    }
    let n = named[0].1;
    match gspmd_segments(module, n) {
        Some(segments) => Mesh::with_segments(named, &segments),
        None => Mesh::new(named),
    }
}

/// The axes (major first) a GSPMD-style module's `n` devices split into: the
/// finest mesh every iota tile assignment is a reshape of (`<=[16,48,8]` and
/// `<=[768,8]` give 16x48x8), if their boundaries nest.
fn gspmd_segments(module: &Module, n: u32) -> Option<Vec<u32>> {
    let mut boundaries = Vec::new();
    for ins in &module.instrs {
        let singles: Vec<&SingleSharding> = match ins.sharding() {
            Some(Sharding::Single(s)) => vec![s],
            Some(Sharding::Tuple(t)) => t.iter().collect(),
            None => continue,
        };
        for s in singles {
            if let tpusim_hlo::attr::ShardingKind::Tiled(ta) = &s.kind {
                boundaries.extend(mesh::iota_boundaries(ta));
            }
        }
    }
    mesh::segments_from_boundaries(n, &boundaries)
}

/// The entry parameters' shardings: their annotations, else replicated.
fn entry_shardings(p: &Partitioner<'_>, module: &Module) -> Result<Vec<Vec<Sh>>, SpmdError> {
    let mut params: Vec<Vec<Sh>> = Vec::new();
    for &pid in &module.entry().params {
        let ins = module.instr(pid);
        params.push(match p.annotation(ins)? {
            Some(s) => s,
            None => ins
                .shape
                .leaves()
                .iter()
                .map(|l| Sh::replicated(l.rank()))
                .collect(),
        });
    }
    Ok(params)
}

/// Makes `new_entry` the entry, hides the computations it no longer reaches,
/// marks the result shardings and sets the module's partition count.
fn finish_module(
    m: &mut Module,
    old_entry: CompId,
    new_entry: CompId,
    root_sh: &[Sh],
    mesh: &Mesh,
    n: u32,
) -> Result<(), SpmdError> {
    m.comps[old_entry.index()].is_entry = false;
    m.comps[new_entry.index()].is_entry = true;
    m.comps[new_entry.index()].name = m.comps[old_entry.index()].name.clone() + "_spmd";
    m.entry = new_entry;
    let root = m.comp(new_entry).root;
    let singles: Vec<_> = root_sh.iter().map(|s| s.to_hlo(mesh)).collect();
    let sharding = if m.instr(root).shape.is_tuple() {
        Sharding::Tuple(singles)
    } else {
        Sharding::Single(
            singles
                .into_iter()
                .next()
                .ok_or_else(|| SpmdError::Internal("root without sharding".into()))?,
        )
    };
    build::set_attr(
        &mut m.instrs[root.index()].attrs,
        "sharding",
        AttrValue::Sharding(Box::new(sharding)),
    );
    // Reachable computations from the new entry (iteratively).
    let mut reach = vec![false; m.comps.len()];
    let mut stack = vec![new_entry];
    while let Some(c) = stack.pop() {
        if std::mem::replace(&mut reach[c.index()], true) {
            continue;
        }
        for &i in &m.comp(c).instrs {
            stack.extend(m.instr(i).called_computations());
        }
    }
    for (c, r) in m.comps.iter_mut().zip(&reach) {
        if !r {
            c.is_async_sugar = true;
        }
    }
    // Computations kept verbatim (reducers, comparators) may hold `Sharding`
    // custom-calls; on one device they are plain copies.
    let kept: Vec<tpusim_hlo::InstrId> = m
        .comp_ids()
        .filter(|c| reach[c.index()])
        .flat_map(|c| m.comp(c).instrs.clone())
        .collect();
    for i in kept {
        let ins = &mut m.instrs[i.index()];
        if ins.opcode == Opcode::CustomCall
            && ins.attr_ident("custom_call_target") == Some("Sharding")
        {
            ins.opcode = Opcode::Copy;
            ins.attrs.clear();
        }
    }
    m.config.num_partitions = Some(i64::from(n));
    m.config.entry_layout = None;
    if let Some(AttrValue::FrontendAttrs(kv)) = &mut m.config.frontend_attributes {
        kv.retain(|(k, _)| !k.starts_with("xla.sdy"));
        if kv.is_empty() {
            m.config.frontend_attributes = None;
        }
    }
    Ok(())
}
