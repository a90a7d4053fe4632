//! The device mesh as *factor axes* and shardings over them.
//!
//! Every named mesh axis (`"data"=16`) is split into its prime factors, major
//! first. A device id is the row-major index over all factor axes (the iota
//! mesh JAX and XLA use), so any iota tile assignment with transposes, any
//! Shardy sub-axis and any named axis is a list of factor axes. A sharding
//! says, per array dim, which factor axes split it (major to minor); axes it
//! does not name replicate it; `partial` axes hold unreduced partial results.

use tpusim_hlo::attr::{prime_factors, DeviceList, ShardingKind, SingleSharding, TileAssignment};

/// Index of a factor axis.
pub type Axis = u8;

/// The factor axes of a mesh of `n` devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mesh {
    pub sizes: Vec<u32>,
    pub strides: Vec<u32>,
    pub n: u32,
    /// The named axes, as the module declares them (for messages and checks).
    pub named: Vec<(String, u32)>,
}

/// Prime factors of `n`, largest first (the major end of an axis).
fn factors_major_first(n: u32) -> Vec<u32> {
    let mut f = prime_factors(n);
    f.sort_unstable_by(|a, b| b.cmp(a));
    f
}

impl Mesh {
    /// A mesh of named axes (row-major device ids), each split into prime factors.
    pub fn new(named: Vec<(String, u32)>) -> Mesh {
        let segments: Vec<u32> = named.iter().map(|(_, s)| *s).collect();
        Mesh::with_segments(named, &segments)
    }

    /// A mesh of named axes whose device ids split, major to minor, into
    /// `segments` (their product is the device count; each is split into
    /// prime factors, largest first). A single unnamed device axis takes the
    /// boundaries its tile assignments imply: `<=[16,48,8]` puts the factor
    /// 3 of 6144 devices between strides 8 and 384, not at the top.
    pub fn with_segments(named: Vec<(String, u32)>, segments: &[u32]) -> Mesh {
        let sizes: Vec<u32> = segments
            .iter()
            .flat_map(|&s| factors_major_first(s))
            .collect();
        let mut strides = vec![1u32; sizes.len()];
        for i in (0..sizes.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * sizes[i + 1];
        }
        let n = sizes.iter().product();
        Mesh {
            sizes,
            strides,
            n,
            named,
        }
    }

    /// The factor axes of a named axis or sub-axis `name:(pre)size`.
    pub fn named_axes(&self, name: &str, sub: Option<(i64, i64)>) -> Option<Vec<Axis>> {
        let pos = self.named.iter().position(|(n, _)| n == name)?;
        let start: usize = self.named[..pos]
            .iter()
            .map(|(_, s)| prime_factors(*s).len())
            .sum();
        let count = prime_factors(self.named[pos].1).len();
        let all: Vec<Axis> = (start..start + count).map(|a| a as Axis).collect();
        let Some((pre, size)) = sub else {
            return Some(all);
        };
        let mut prod = 1i64;
        let mut out = Vec::new();
        for a in all {
            if prod < pre {
                prod *= i64::from(self.size(a));
                continue;
            }
            if prod != pre {
                return None;
            }
            if self.count(&out) as i64 == size {
                break;
            }
            out.push(a);
        }
        (self.count(&out) as i64 == size).then_some(out)
    }

    pub fn axes(&self) -> impl Iterator<Item = Axis> {
        0..self.sizes.len() as Axis
    }

    pub fn size(&self, a: Axis) -> u32 {
        self.sizes[a as usize]
    }

    /// The named axis factor axis `a` belongs to (`"data"`), for messages.
    pub fn axis_name(&self, a: Axis) -> String {
        let mut first = 0usize;
        for (name, size) in &self.named {
            let factors = prime_factors(*size).len();
            if (a as usize) < first + factors {
                return name.clone();
            }
            first += factors;
        }
        format!("axis {a}")
    }

    /// Product of the sizes of `axes`.
    pub fn count(&self, axes: &[Axis]) -> u32 {
        axes.iter().map(|&a| self.size(a)).product()
    }

    /// The digit of device `d` along factor axis `a`.
    pub fn digit(&self, d: u32, a: Axis) -> u32 {
        d / self.strides[a as usize] % self.sizes[a as usize]
    }

    /// Mixed-radix index of device `d` over `axes` (major first).
    pub fn index(&self, d: u32, axes: &[Axis]) -> u32 {
        axes.iter()
            .fold(0, |acc, &a| acc * self.size(a) + self.digit(d, a))
    }

    /// Each device's first row of a dim tiled by `axes`, `rows` rows a device.
    pub fn first_rows(&self, axes: &[Axis], rows: i64) -> Vec<i64> {
        (0..self.n)
            .map(|d| i64::from(self.index(d, axes)) * rows)
            .collect()
    }

    /// Groups of devices that differ only along `axes`, each ordered by their
    /// index over `axes`; groups ordered by their first device.
    pub fn groups(&self, axes: &[Axis]) -> Vec<Vec<i64>> {
        let size = self.count(axes) as usize;
        let mut groups: Vec<Vec<i64>> = Vec::with_capacity(self.n as usize / size.max(1));
        let mut slot = vec![usize::MAX; self.n as usize];
        for d in 0..self.n {
            let base = axes.iter().fold(d, |acc, &a| {
                acc - self.digit(d, a) * self.strides[a as usize]
            });
            if slot[base as usize] == usize::MAX {
                slot[base as usize] = groups.len();
                groups.push(vec![0; size]);
            }
            groups[slot[base as usize]][self.index(d, axes) as usize] = i64::from(d);
        }
        groups
    }
}

/// Sharding of one array over factor axes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sh {
    pub dims: Vec<Vec<Axis>>,
    /// Axes along which devices hold partial results still to be reduced.
    pub partial: Vec<Axis>,
    /// The reduction that combines partial results (None: add).
    pub reducer: Option<tpusim_hlo::CompId>,
}

impl Sh {
    pub fn replicated(rank: usize) -> Sh {
        Sh {
            dims: vec![Vec::new(); rank],
            partial: Vec::new(),
            reducer: None,
        }
    }
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    pub fn is_replicated(&self) -> bool {
        self.partial.is_empty() && self.dims.iter().all(Vec::is_empty)
    }
    pub fn without_partial(&self) -> Sh {
        Sh {
            dims: self.dims.clone(),
            partial: Vec::new(),
            reducer: None,
        }
    }
    /// All axes used by dims (not partial).
    pub fn used(&self) -> Vec<Axis> {
        self.dims.iter().flatten().copied().collect()
    }
    /// Number of tiles along dim `d`.
    pub fn tiles(&self, mesh: &Mesh, d: usize) -> u32 {
        mesh.count(&self.dims[d])
    }
    pub fn total_tiles(&self, mesh: &Mesh) -> u32 {
        mesh.count(&self.used())
    }
    /// Per-device dims of a global array (uneven dims rounded up, as XLA pads).
    pub fn local_dims(&self, mesh: &Mesh, global: &[i64]) -> Vec<i64> {
        global
            .iter()
            .enumerate()
            .map(|(d, &g)| ceil_div(g, i64::from(self.tiles(mesh, d))))
            .collect()
    }
    /// The HLO sharding text form of this sharding (partial axes must be empty).
    pub fn to_hlo(&self, mesh: &Mesh) -> SingleSharding {
        let used = self.used();
        let base = SingleSharding {
            kind: ShardingKind::Replicated,
            last_tile_dim_replicate: false,
            last_tile_dims: Vec::new(),
            shard_group: None,
            metadata: None,
        };
        if used.is_empty() {
            return base;
        }
        let rep: Vec<Axis> = mesh.axes().filter(|a| !used.contains(a)).collect();
        let mut tdims: Vec<i64> = (0..self.rank())
            .map(|d| i64::from(self.tiles(mesh, d)))
            .collect();
        if !rep.is_empty() {
            tdims.push(i64::from(mesh.count(&rep)));
        }
        let mut devices = vec![0i64; mesh.n as usize];
        for d in 0..mesh.n {
            let mut pos = 0u64;
            for (k, axes) in self.dims.iter().enumerate() {
                pos = pos * tdims[k] as u64 + u64::from(mesh.index(d, axes));
            }
            if !rep.is_empty() {
                pos = pos * u64::from(mesh.count(&rep)) + u64::from(mesh.index(d, &rep));
            }
            devices[pos as usize] = i64::from(d);
        }
        let iota: Vec<i64> = (0..i64::from(mesh.n)).collect();
        let devices = if devices == iota {
            DeviceList::Iota {
                reshape: vec![i64::from(mesh.n)],
                transpose: Vec::new(),
            }
        } else {
            DeviceList::Explicit(devices)
        };
        SingleSharding {
            kind: ShardingKind::Tiled(TileAssignment {
                dims: tdims,
                devices,
            }),
            last_tile_dim_replicate: !rep.is_empty(),
            ..base
        }
    }
}

pub fn ceil_div(a: i64, b: i64) -> i64 {
    if b <= 1 {
        a
    } else {
        (a + b - 1) / b
    }
}

/// Why an HLO sharding cannot be read as a sharding over the mesh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    TileCount { tiles: i64, devices: u32 },
    Rank { tile_dims: usize, rank: usize },
    NotOnMesh,
    Manual,
    Unsupported(String),
}

/// Device-id boundaries (the strides where a tile assignment's iota
/// dims begin) as segment sizes, major to minor, if every boundary divides
/// the next; `None` when the assignments disagree.
pub fn segments_from_boundaries(n: u32, boundaries: &[u64]) -> Option<Vec<u32>> {
    let mut b: Vec<u64> = boundaries
        .iter()
        .copied()
        .filter(|&x| x > 1 && x < u64::from(n))
        .collect();
    b.push(1);
    b.push(u64::from(n));
    b.sort_unstable();
    b.dedup();
    if b.windows(2).any(|w| w[1] % w[0] != 0) {
        return None;
    }
    let mut segments: Vec<u32> = b
        .windows(2)
        .map(|w| u32::try_from(w[1] / w[0]).ok())
        .collect::<Option<_>>()?;
    segments.reverse();
    Some(segments)
}

/// The stride boundaries an iota tile assignment implies: where each of its
/// reshape dims begins (and, without a transpose, each tile dim).
pub fn iota_boundaries(ta: &TileAssignment) -> Vec<u64> {
    let DeviceList::Iota { reshape, transpose } = &ta.devices else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut push_strides = |dims: &[i64]| {
        let mut stride = 1u64;
        for &d in dims.iter().rev() {
            out.push(stride);
            stride = stride.saturating_mul(u64::try_from(d).unwrap_or(1).max(1));
        }
    };
    push_strides(reshape);
    let identity = transpose.iter().enumerate().all(|(k, &t)| t == k as i64);
    if identity {
        push_strides(&ta.dims);
    }
    out
}

/// Reads an HLO sharding of an array of `rank` dims. Maximal shardings read as
/// replicated (every device computes the value; only the owner's copy counts).
pub fn read_sharding(s: &SingleSharding, rank: usize, mesh: &Mesh) -> Result<Sh, ReadError> {
    match &s.kind {
        ShardingKind::Replicated | ShardingKind::Maximal { .. } | ShardingKind::Unknown => {
            Ok(Sh::replicated(rank))
        }
        ShardingKind::Manual => Err(ReadError::Manual),
        ShardingKind::Tiled(ta) => read_tiled(ta, s, rank, mesh),
        ShardingKind::Unreduced => Err(ReadError::Unsupported("unreduced sharding".into())),
        ShardingKind::Raw(t) => Err(ReadError::Unsupported(format!("sharding form '{t}'"))),
    }
}

/// The free part of a partially manual sharding (`last_tile_dims={manual}`:
/// XLA's form of a shard_map body over some of the mesh axes): its manual
/// tile dims made replicated ones, so that it reads as the tiling over the
/// free axes.
pub fn free_part(s: &SingleSharding) -> SingleSharding {
    let mut free = s.clone();
    for t in &mut free.last_tile_dims {
        if t == "manual" {
            *t = "replicated".into();
        }
    }
    free
}

fn read_tiled(
    ta: &TileAssignment,
    s: &SingleSharding,
    rank: usize,
    mesh: &Mesh,
) -> Result<Sh, ReadError> {
    if s.last_tile_dims.iter().any(|t| t == "manual") {
        return Err(ReadError::Manual);
    }
    let extra = usize::from(s.last_tile_dim_replicate) + s.last_tile_dims.len();
    if ta.dims.len() != rank + extra {
        return Err(ReadError::Rank {
            tile_dims: ta.dims.len(),
            rank,
        });
    }
    let tiles: i64 = ta.dims.iter().product();
    if tiles != i64::from(mesh.n) || ta.dims.iter().any(|&d| d < 1) {
        return Err(ReadError::TileCount {
            tiles,
            devices: mesh.n,
        });
    }
    let devices = ta.devices.expand();
    if devices.len() as i64 != tiles || devices.first() != Some(&0) {
        return Err(ReadError::NotOnMesh);
    }
    let tdims: Vec<usize> = ta.dims.iter().map(|&d| d as usize).collect();
    let mut strides = vec![1usize; tdims.len()];
    for i in (0..tdims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * tdims[i + 1];
    }
    let mut used = vec![false; mesh.sizes.len()];
    let mut dims: Vec<Vec<Axis>> = Vec::with_capacity(tdims.len());
    for (i, &t) in tdims.iter().enumerate() {
        let mut axes: Vec<Axis> = Vec::new();
        let mut prod = 1usize;
        while prod < t {
            let dev = devices[prod * strides[i]];
            let a = mesh
                .axes()
                .find(|&a| !used[a as usize] && i64::from(mesh.strides[a as usize]) == dev)
                .ok_or(ReadError::NotOnMesh)?;
            used[a as usize] = true;
            axes.insert(0, a);
            prod *= mesh.size(a) as usize;
        }
        if prod != t {
            return Err(ReadError::NotOnMesh);
        }
        dims.push(axes);
    }
    // Verify the whole assignment against the axes found.
    for (pos, &dev) in devices.iter().enumerate() {
        let mut want = 0i64;
        for (i, axes) in dims.iter().enumerate() {
            let mut c = pos / strides[i] % tdims[i];
            for &a in axes.iter().rev() {
                let sz = mesh.size(a) as usize;
                want += (c % sz) as i64 * i64::from(mesh.strides[a as usize]);
                c /= sz;
            }
        }
        if want != dev {
            return Err(ReadError::NotOnMesh);
        }
    }
    dims.truncate(rank);
    Ok(Sh {
        dims,
        partial: Vec::new(),
        reducer: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh24() -> Mesh {
        Mesh::new(vec![("data".into(), 2), ("model".into(), 4)])
    }

    fn tiled(dims: Vec<i64>, devices: DeviceList, rep: bool) -> SingleSharding {
        SingleSharding {
            kind: ShardingKind::Tiled(TileAssignment { dims, devices }),
            last_tile_dim_replicate: rep,
            last_tile_dims: Vec::new(),
            shard_group: None,
            metadata: None,
        }
    }

    #[test]
    fn reads_transposed_iota_and_round_trips() {
        let m = mesh24();
        let s = tiled(
            vec![1, 4, 2],
            DeviceList::Iota {
                reshape: vec![2, 4],
                transpose: vec![1, 0],
            },
            true,
        );
        let sh = read_sharding(&s, 2, &m).unwrap();
        assert_eq!(sh.dims, vec![vec![], vec![1, 2]]);
        let back = read_sharding(&sh.to_hlo(&m), 2, &m).unwrap();
        assert_eq!(back, sh);
    }

    #[test]
    fn groups_follow_axes_order() {
        let m = mesh24();
        assert_eq!(m.groups(&[1, 2]), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(
            m.groups(&[0]),
            (0..4).map(|i| vec![i, i + 4]).collect::<Vec<_>>()
        );
    }

    #[test]
    fn wrong_tile_count_is_an_error() {
        let s = tiled(
            vec![4, 1],
            DeviceList::Iota {
                reshape: vec![4],
                transpose: vec![],
            },
            false,
        );
        assert_eq!(
            read_sharding(&s, 2, &mesh24()),
            Err(ReadError::TileCount {
                tiles: 4,
                devices: 8
            })
        );
    }
}
