//! A pod: `slices` copies of one torus slice, joined over DCN.
//!
//! Physical locations are numbered `loc = core + D·(chip + C·slice)` with
//! `D` devices per chip, `C` chips per slice and `chip = x + X·(y + Y·z)`
//! (the first axis varies fastest). By default device id `d` sits at
//! location `d`; a device order file can place ids anywhere.

use crate::placement::{lay_mesh, lay_mesh_splitting, physical_axes, slice_mesh, MeshLayout};
use crate::PodError;
use tpusim_arch::{Chip, Topology, Wraparound};

/// Largest number of torus axes a pod may have.
pub const MAX_AXES: usize = 3;

/// A pod of chips: shape, links and the device placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Pod {
    /// Chips per axis of one slice.
    pub shape: Vec<u32>,
    /// Whether each axis has wraparound links.
    pub wraps: Vec<bool>,
    /// Slices joined over DCN.
    pub slices: u32,
    /// JAX devices per chip (2 on v2/v3/TPU7x).
    pub devices_per_chip: u32,
    /// One ICI link, one direction, bytes/s.
    pub link_bw: f64,
    /// Latency per ICI hop, seconds.
    pub hop_latency_s: f64,
    /// Between the devices of one chip (their HBM bandwidth), bytes/s.
    pub onchip_bw: f64,
    /// DCN bandwidth per chip and direction that collectives achieve
    /// (line rate times the chip file's `dcn_efficiency`), bytes/s.
    pub dcn_bw: f64,
    /// The fraction of the DCN line rate that `dcn_bw` is.
    pub dcn_efficiency: f64,
    /// Latency of one DCN transfer, seconds.
    pub dcn_latency_s: f64,
    /// Location of each device id (identity when `None`).
    order: Option<Vec<u32>>,
    /// Whether `jax.make_mesh` may split a physical axis between mesh axes
    /// on this chip (the chip file's `jax_mesh_splits_axes`).
    pub mesh_splits_axes: bool,
}

/// Where a device sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub slice: u32,
    /// Chip index within the slice.
    pub chip: u32,
    /// Device index within the chip.
    pub core: u32,
    /// Chip coordinates (unused axes are 0).
    pub coords: [u32; MAX_AXES],
}

/// `"4x4x4"` -> `[4, 4, 4]`.
pub fn parse_shape(text: &str) -> Result<Vec<u32>, PodError> {
    let bad = || PodError::BadShape(text.to_string());
    let dims: Vec<u32> = text
        .trim()
        .split(['x', 'X'])
        .map(|p| p.trim().parse::<u32>().ok().filter(|&n| n >= 1))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    if dims.is_empty() || dims.len() > MAX_AXES {
        return Err(bad());
    }
    if dims
        .iter()
        .try_fold(1u64, |p, &d| p.checked_mul(u64::from(d)))
        .is_none()
    {
        return Err(bad());
    }
    Ok(dims)
}

/// The slice shape used when none is given: the module's devices (rounded up
/// to whole chips) spread over the chip's torus axes as evenly as their prime
/// factors allow, later axes first on ties (8 chips on a 2D torus: 2x4; 64
/// on a 3D torus: 4x4x4).
pub fn default_shape(chip: &Chip, devices: u64) -> Vec<u32> {
    let dims = match &chip.ici.topology {
        Topology::Torus { dims, .. } => (*dims as usize).clamp(1, MAX_AXES),
        Topology::Switch { .. } => 1,
    };
    let per_chip = u64::from(chip.devices_per_chip.max(1));
    let mut chips = devices.max(1).div_ceil(per_chip).min(u64::from(u32::MAX));
    let mut factors = Vec::new();
    let mut f = 2;
    while chips > 1 && f * f <= chips {
        while chips % f == 0 {
            factors.push(f);
            chips /= f;
        }
        f += 1;
    }
    if chips > 1 {
        factors.push(chips);
    }
    factors.sort_unstable_by(|a, b| b.cmp(a));
    let mut shape = vec![1u64; dims];
    for f in factors {
        // The smallest axis, the last one on ties.
        let k = (0..dims).rev().min_by_key(|&k| shape[k]).unwrap_or(0);
        shape[k] *= f;
    }
    shape
        .into_iter()
        .map(|d| d.min(u64::from(u32::MAX)) as u32)
        .collect()
}

/// Whether a slice of `shape` exceeds the largest slice of the chip's torus.
/// A torus built of whole cubes joined by optical switches (v4, v5p) can take
/// any arrangement of cubes up to the pod's chip count (Google's slice tables
/// list v5p shapes such as 4x4x244 and 8x16x48 for a 16x20x28 pod): only the
/// chip count is compared. Otherwise the axes are compared largest to
/// largest.
fn too_large(topology: &Topology, shape: &[u32], max_slice_shape: &[u32]) -> bool {
    let chips = |s: &[u32]| s.iter().map(|&d| u64::from(d)).product::<u64>();
    let cube_built = matches!(
        topology,
        Topology::Torus {
            wraparound: Wraparound::WholeCubes { .. },
            ..
        }
    );
    if cube_built {
        return chips(shape) > chips(max_slice_shape);
    }
    let mut want = shape.to_vec();
    let mut max = max_slice_shape.to_vec();
    want.sort_unstable();
    max.sort_unstable();
    want.iter().zip(&max).any(|(w, m)| w > m)
}

/// The largest slice in words: a shape, or a chip count of cubes.
fn largest_slice_text(topology: &Topology, max_slice_shape: &[u32]) -> String {
    match topology {
        Topology::Torus {
            wraparound: Wraparound::WholeCubes { cube_edge: e },
            ..
        } => {
            let chips: u64 = max_slice_shape.iter().map(|&d| u64::from(d)).product();
            format!("{chips} chips, any arrangement of {e}x{e}x{e} cubes")
        }
        _ => shape_text(max_slice_shape),
    }
}

pub(crate) fn shape_text(shape: &[u32]) -> String {
    shape
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join("x")
}

impl Pod {
    /// A pod of `slices` slices of `shape` chips of `chip`, checked against
    /// the chip's torus: a shape with fewer axes gets axes of 1, and no slice
    /// may exceed the largest one (see [`too_large`]).
    pub fn for_chip(chip: &Chip, shape: &[u32], slices: u32) -> Result<Pod, PodError> {
        let Topology::Torus {
            dims,
            max_slice_shape,
            ..
        } = &chip.ici.topology
        else {
            return Err(PodError::NotTorus(chip.name.clone()));
        };
        let dims = *dims as usize;
        if shape.is_empty() || shape.len() != dims {
            return Err(PodError::Dims {
                chip: chip.name.clone(),
                dims,
                shape: shape_text(shape),
                got: shape.len(),
            });
        }
        let mut full = shape.to_vec();
        full.resize(dims, 1);
        if too_large(&chip.ici.topology, &full, max_slice_shape) {
            return Err(PodError::TooLarge {
                chip: chip.name.clone(),
                shape: shape_text(shape),
                max: largest_slice_text(&chip.ici.topology, max_slice_shape),
            });
        }
        let mut pod = Pod::unchecked(chip, &full, slices)?;
        pod.shape.truncate(shape.len().max(1));
        pod.wraps.truncate(pod.shape.len());
        Ok(pod)
    }

    /// Like [`Pod::for_chip`] without the largest-slice check (for studies of
    /// shapes larger than a chip file allows).
    pub fn unchecked(chip: &Chip, shape: &[u32], slices: u32) -> Result<Pod, PodError> {
        if slices == 0 {
            return Err(PodError::NoSlices);
        }
        if shape.is_empty() || shape.len() > MAX_AXES || shape.contains(&0) {
            return Err(PodError::BadShape(shape_text(shape)));
        }
        let chips = shape
            .iter()
            .fold(u64::from(slices), |n, &a| n.saturating_mul(u64::from(a)));
        if chips > tpusim_hlo::MAX_DEVICES {
            return Err(PodError::TooManyChips {
                shape: shape_text(shape),
                slices,
                chips,
            });
        }
        if matches!(chip.ici.topology, Topology::Switch { .. }) {
            return Err(PodError::NotTorus(chip.name.clone()));
        }
        let wraps = (0..shape.len())
            .map(|a| shape[a] > 1 && chip.ici.topology.axis_wraps(shape, a))
            .collect();
        Ok(Pod {
            shape: shape.to_vec(),
            wraps,
            slices,
            devices_per_chip: chip.devices_per_chip.max(1),
            link_bw: chip.ici.link_bandwidth_bytes_per_s_per_direction,
            hop_latency_s: chip.ici.hop_latency_s,
            onchip_bw: chip.memory.hbm_bandwidth_bytes_per_s,
            dcn_bw: chip.host.dcn_bytes_per_s_per_direction * chip.host.dcn_efficiency,
            dcn_efficiency: chip.host.dcn_efficiency,
            dcn_latency_s: chip.host.dcn_latency_s,
            order: None,
            mesh_splits_axes: matches!(
                chip.ici.topology,
                Topology::Torus {
                    jax_mesh_splits_axes: true,
                    ..
                }
            ),
        })
    }

    /// The topology as written, e.g. `4x4x4` or `2 x 16x16`.
    pub fn describe(&self) -> String {
        let s = shape_text(&self.shape);
        if self.slices > 1 {
            format!("{} x {s}", self.slices)
        } else {
            s
        }
    }

    /// Chips in one slice.
    pub fn chips_per_slice(&self) -> u32 {
        self.shape.iter().product()
    }

    /// Chips in the whole pod.
    pub fn chips(&self) -> u64 {
        u64::from(self.chips_per_slice()) * u64::from(self.slices)
    }

    /// Devices in the whole pod.
    pub fn devices(&self) -> u64 {
        self.chips() * u64::from(self.devices_per_chip)
    }

    /// Number of torus axes.
    pub fn axes(&self) -> usize {
        self.shape.len()
    }

    /// Location of device `id` (`None` outside the pod).
    pub fn loc(&self, id: u32) -> Option<u32> {
        match &self.order {
            Some(o) => o.get(id as usize).copied(),
            None => (u64::from(id) < self.devices()).then_some(id),
        }
    }

    /// Where location `loc` is.
    pub fn place(&self, loc: u32) -> Place {
        let d = self.devices_per_chip.max(1);
        let core = loc % d;
        let global_chip = loc / d;
        let per = self.chips_per_slice().max(1);
        let (slice, mut chip) = (global_chip / per, global_chip % per);
        let index = chip;
        let mut coords = [0; MAX_AXES];
        for (a, &n) in self.shape.iter().enumerate() {
            coords[a] = chip % n;
            chip /= n;
        }
        Place {
            slice,
            chip: index,
            core,
            coords,
        }
    }

    /// Location of a place (inverse of [`Pod::place`]).
    pub fn loc_of(&self, p: &Place) -> u32 {
        let chip = self.chip_index(&p.coords);
        p.core + self.devices_per_chip * (chip + self.chips_per_slice() * p.slice)
    }

    /// Chip index within a slice of chip coordinates.
    pub fn chip_index(&self, coords: &[u32; MAX_AXES]) -> u32 {
        let mut chip = 0;
        for a in (0..self.axes()).rev() {
            chip = chip * self.shape[a] + coords[a];
        }
        chip
    }

    /// Chip index across all slices of a location.
    pub fn global_chip(&self, loc: u32) -> u32 {
        loc / self.devices_per_chip.max(1)
    }

    /// Places the devices of a program partitioned over `mesh` (its axis
    /// sizes, major first) as JAX lays that mesh on each slice (see
    /// [`crate::placement`]); the slices take the leading mesh positions.
    /// Returns the layout of one slice, or why there is none (the order is
    /// then left as it was).
    pub fn place_mesh(&mut self, mesh: &[u32]) -> Result<MeshLayout, String> {
        let per_slice = slice_mesh(mesh, self.slices).ok_or_else(|| {
            format!(
                "{} slices do not divide the mesh's leading axes",
                self.slices
            )
        })?;
        let physical = physical_axes(&self.shape, self.devices_per_chip);
        let layout = if self.mesh_splits_axes {
            lay_mesh_splitting(&physical, &per_slice)?
        } else {
            lay_mesh(&physical, &per_slice)?
        };
        let mut order = Vec::with_capacity(layout.coords.len() * self.slices as usize);
        for slice in 0..self.slices {
            for c in &layout.coords {
                order.push(self.loc_of(&Place {
                    slice,
                    chip: 0,
                    core: c[3],
                    coords: [c[0], c[1], c[2]],
                }));
            }
        }
        self.order = Some(order);
        Ok(layout)
    }

    /// Reads a device order: one line per device id, in id order, holding the
    /// chip coordinates (one per axis), then optionally the device within the
    /// chip and the slice; blank lines and `#` comments are skipped. Devices
    /// not listed take the remaining locations in increasing order.
    pub fn set_device_order(&mut self, text: &str) -> Result<(), PodError> {
        let total = self.devices();
        let mut used = vec![false; total as usize];
        let mut order = Vec::new();
        for (k, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |msg: String| PodError::DeviceOrder { line: k + 1, msg };
            let nums: Vec<u32> = line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|e| err(format!("{e}")))?;
            let axes = self.axes();
            if nums.len() < axes || nums.len() > axes + 2 {
                return Err(err(format!(
                    "expected {axes} coordinates, then optionally the device within the chip \
                     and the slice; got {} numbers",
                    nums.len()
                )));
            }
            let mut coords = [0; MAX_AXES];
            for a in 0..axes {
                if nums[a] >= self.shape[a] {
                    return Err(err(format!(
                        "coordinate {} on axis {} is outside 0..{}",
                        nums[a], a, self.shape[a]
                    )));
                }
                coords[a] = nums[a];
            }
            let core = nums.get(axes).copied().unwrap_or(0);
            let slice = nums.get(axes + 1).copied().unwrap_or(0);
            if core >= self.devices_per_chip || slice >= self.slices {
                return Err(err(format!(
                    "device {core} of slice {slice} does not exist ({} per chip, {} slices)",
                    self.devices_per_chip, self.slices
                )));
            }
            let loc = self.loc_of(&Place {
                slice,
                chip: 0,
                core,
                coords,
            });
            if std::mem::replace(&mut used[loc as usize], true) {
                return Err(err(format!("location {line} is given twice")));
            }
            order.push(loc);
        }
        if order.len() as u64 > total {
            return Err(PodError::DeviceOrder {
                line: 0,
                msg: format!("{} devices listed, the pod has {total}", order.len()),
            });
        }
        order.extend((0..total as u32).filter(|&l| !used[l as usize]));
        self.order = Some(order);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpusim_arch::by_id;

    #[test]
    fn default_shapes() {
        assert_eq!(default_shape(&by_id("v5e").unwrap(), 8), vec![2, 4]);
        assert_eq!(default_shape(&by_id("v5p").unwrap(), 64), vec![4, 4, 4]);
        assert_eq!(default_shape(&by_id("v5p").unwrap(), 1024), vec![8, 8, 16]);
        assert_eq!(default_shape(&by_id("v2").unwrap(), 8), vec![2, 2]);
        assert_eq!(default_shape(&by_id("v5e").unwrap(), 1), vec![1, 1]);
    }

    #[test]
    fn cube_built_slices_are_limited_by_chip_count() {
        let v5p = by_id("v5p").unwrap();
        // MaxText's GPT-3 v5p-12288 topology: an axis longer than the pod's.
        assert!(Pod::for_chip(&v5p, &[8, 16, 48], 1).is_ok());
        assert!(Pod::for_chip(&v5p, &[4, 4, 244], 1).is_ok());
        let err = Pod::for_chip(&v5p, &[16, 20, 32], 1).unwrap_err();
        assert!(err.to_string().contains("8960 chips"), "{err}");
        // A 2D torus without cubes keeps its axes.
        let v5e = by_id("v5e").unwrap();
        assert!(Pod::for_chip(&v5e, &[8, 32], 1).is_err());
        assert!(Pod::for_chip(&v5e, &[16, 8], 1).is_ok());
    }

    #[test]
    fn parses_shapes() {
        assert_eq!(parse_shape("4x4x4").unwrap(), vec![4, 4, 4]);
        assert_eq!(parse_shape("16x20x28").unwrap(), vec![16, 20, 28]);
        for bad in ["", "4x", "0x4", "4x4x4x4", "ax4", "-1x2"] {
            assert!(parse_shape(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wraparound_follows_the_generation() {
        let v5e = by_id("v5e").unwrap();
        let small = Pod::for_chip(&v5e, &[4, 4], 1).unwrap();
        assert_eq!(small.wraps, vec![false, false]);
        let edge = Pod::for_chip(&v5e, &[8, 16], 1).unwrap();
        assert_eq!(edge.wraps, vec![false, true]);
        let v5p = by_id("v5p").unwrap();
        assert_eq!(
            Pod::for_chip(&v5p, &[4, 4, 4], 1).unwrap().wraps,
            vec![true; 3]
        );
        assert_eq!(
            Pod::for_chip(&v5p, &[2, 2, 4], 1).unwrap().wraps,
            vec![false; 3]
        );
        let full = Pod::for_chip(&v5p, &[16, 20, 28], 1).unwrap();
        assert_eq!(full.wraps, vec![true; 3]);
        let err = Pod::for_chip(&v5p, &[16, 20, 32], 1).unwrap_err();
        assert!(matches!(err, PodError::TooLarge { .. }), "{err}");
        assert!(Pod::for_chip(&v5p, &[24, 16, 16], 1).is_ok());
        assert!(Pod::for_chip(&v5e, &[4, 4, 4], 1).is_err());
        assert!(Pod::for_chip(&by_id("h100").unwrap(), &[8], 1).is_err());
    }

    #[test]
    fn first_axis_varies_fastest() {
        let pod = Pod::for_chip(&by_id("v5p").unwrap(), &[4, 4, 4], 2).unwrap();
        let p = pod.place(pod.loc(1 + 4 * (2 + 4 * 3)).unwrap());
        assert_eq!(p.coords, [1, 2, 3]);
        let q = pod.place(pod.loc(64 + 5).unwrap());
        assert_eq!((q.slice, q.coords), (1, [1, 1, 0]));
        for l in 0..pod.devices() as u32 {
            assert_eq!(pod.loc_of(&pod.place(l)), l);
        }
        let v2 = Pod::for_chip(&by_id("v2").unwrap(), &[2, 2], 1).unwrap();
        assert_eq!(v2.devices(), 8);
        assert_eq!(v2.place(3).core, 1);
        assert_eq!(v2.place(3).coords, [1, 0, 0]);
    }

    #[test]
    fn device_order_files() {
        let mut pod = Pod::for_chip(&by_id("v5e").unwrap(), &[2, 2], 1).unwrap();
        pod.set_device_order("# swap 0 and 3\n1 1\n0 1\n").unwrap();
        assert_eq!(pod.loc(0), Some(3));
        assert_eq!(pod.loc(1), Some(2));
        assert_eq!(pod.loc(2), Some(0));
        assert_eq!(pod.loc(3), Some(1));
        assert_eq!(pod.loc(4), None);
        assert!(pod.set_device_order("0 0\n0 0\n").is_err());
        assert!(pod.set_device_order("0 2\n").is_err());
        assert!(pod.set_device_order("0\n").is_err());
    }
}
