//! tpusim-pod: many chips joined by ICI (and slices joined by DCN).
//!
//! - [`Pod`] (`topology.rs`): a torus slice (`4x4`, `4x4x4`, `16x20x28`)
//!   repeated over `slices`, built from a chip's `[ici]` and `[host]` data:
//!   wraparound per axis, per-link bandwidth and hop latency, DCN, and the
//!   order in which device ids are laid on the torus.
//! - [`placement`]: where a mesh's devices sit when the program does not
//!   say, as JAX's `create_device_mesh` lays a mesh on a TPU slice.
//! - [`collective`]: what a collective instruction of an SPMD module does —
//!   its kind, array size, and replica groups or source-target pairs as
//!   device ids (explicit, iota and mesh groups, all group modes).
//! - [`geometry`]: how a group lies on the torus: which axes it spans, with
//!   how many devices, whether each forms a wrapping ring, hop strides, DCN.
//! - [`analytic`]: the scaling book's cost model (bidirectional rings per
//!   axis, multi-axis groups using all their links, all-reduce as
//!   reduce-scatter then all-gather, all-to-all over the bisection,
//!   point-to-point over several paths, per-hop latency bounds, hierarchical
//!   DCN).
//! - [`bound`]: the links' bandwidth bound (bytes that must enter or leave
//!   each chip, cross each axis cut or each slice, over the links available
//!   to the groups): neither model is ever faster.
//! - [`sim`]: an event-driven simulation of every link (FIFO per link and
//!   direction, cut-through routing) that runs the same ring algorithms and
//!   arbitrary permutations with contention.
//! - [`PodModel`] (`model.rs`): implements `tpusim_perf::CommModel`, so the
//!   performance model prices collectives through either network model.
//!
//! Hardware numbers come from `tpusim-arch` chip files, never from here. This
//! crate never prints and never panics on a parsed module.

pub mod analytic;
pub mod bound;
pub mod collective;
pub mod geometry;
mod model;
pub mod placement;
mod radix;
pub mod sim;
mod topology;

pub use collective::{Collective, CollectiveKind};
pub use model::{Network, PodModel, PodOptions};
pub use topology::{default_shape, parse_shape, Place, Pod};

/// Errors building a pod or reading its device order.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PodError {
    #[error("bad topology `{0}`: write chips per axis such as 4x4 or 4x4x4")]
    BadShape(String),
    #[error(
        "{chip} has a {dims}-axis torus; topology {shape} has {got} axes: write {dims} axes \
         (chips per axis, e.g. {}), or leave --topology out for the module's own device count",
        if *dims == 3 { "2x2x2 or 4x4x8" } else { "2x4 or 16x16" }
    )]
    Dims {
        chip: String,
        dims: usize,
        shape: String,
        got: usize,
    },
    #[error("topology {shape} is larger than the largest {chip} slice ({max})")]
    TooLarge {
        chip: String,
        shape: String,
        max: String,
    },
    #[error("{0} has a switched interconnect, not a torus: pods of it are not modeled")]
    NotTorus(String),
    #[error("--slices must be at least 1")]
    NoSlices,
    #[error(
        "{slices} slice(s) of {shape} make {chips} chips; tpusim simulates at most {} (tpusim_hlo::MAX_DEVICES)",
        tpusim_hlo::MAX_DEVICES
    )]
    TooManyChips {
        shape: String,
        slices: u32,
        chips: u64,
    },
    #[error("device order line {line}: {msg}")]
    DeviceOrder { line: usize, msg: String },
    #[error("the module needs {need} devices but the pod has {have}")]
    TooFewDevices { need: u64, have: u64 },
    #[error(
        "--slices {slices} is more than the module's {need} device(s): every slice needs at \
         least one; give --slices between 1 and {need}"
    )]
    TooManySlices { slices: u32, need: u64 },
    #[error(
        "the mesh {mesh} has {devices} devices, the module runs on {used}: give the mesh its \
         device ids number"
    )]
    MeshDevices {
        mesh: String,
        devices: u64,
        used: u64,
    },
    #[error("a mesh has 1 to {max} axes, each of at least 1 device; got {mesh}")]
    BadMesh { mesh: String, max: usize },
}

/// Most axes a given mesh may have (JAX meshes rarely have more than five).
pub const MAX_MESH_AXES: usize = 8;

/// Checks a mesh a user gives for an already partitioned module (`--mesh`,
/// Python's `mesh=`): a few axes of at least one device whose product is the
/// module's device count.
pub fn check_given_mesh(mesh: &[u32], m: &tpusim_hlo::Module) -> Result<(), PodError> {
    let text = || {
        mesh.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("x")
    };
    if mesh.is_empty() || mesh.len() > MAX_MESH_AXES || mesh.contains(&0) {
        return Err(PodError::BadMesh {
            mesh: text(),
            max: MAX_MESH_AXES,
        });
    }
    let devices = mesh
        .iter()
        .fold(1u64, |n, &a| n.saturating_mul(u64::from(a)));
    let used = collective::devices_used(m);
    if devices != used {
        return Err(PodError::MeshDevices {
            mesh: text(),
            devices,
            used,
        });
    }
    Ok(())
}
