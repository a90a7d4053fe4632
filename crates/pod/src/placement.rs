//! Where the devices of a logical mesh sit on a slice when the program does not
//! say: as JAX lays a mesh on a TPU slice.
//!
//! A program partitioned from mesh shardings numbers its devices by their
//! position in the mesh (row-major). On a TPU, `jax.make_mesh` and
//! `mesh_utils.create_device_mesh` (what MaxText calls) decide which chip each
//! position gets: the mesh axes, last (most network-intensive) first, each take
//! the largest set of still-free physical axes whose sizes multiply to the
//! axis's size, trying sets in order (`_create_device_mesh_for_nd_torus`).
//! The physical axes are `x, y, z` (a 2D slice has `z = 1`), then the devices
//! within a chip when a chip has more than one. JAX refuses a mesh that would
//! have to split a physical axis ([`lay_mesh`] too), except where
//! `jax.make_mesh` allows splitting (v5e): then [`lay_mesh_splitting`] lays
//! it as `_create_device_mesh_for_nd_torus_splitting_axes` does.
//!
//! Not modelled: the fixed device orders JAX uses for a few small slices (the
//! 2x2, 2x4 and 4x4 trays of v5e/v6e, v5p's 2x2x2).

use tpusim_hlo::attr::prime_factors;

/// How a mesh was laid on one slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshLayout {
    /// For each mesh axis, the physical axes it spans (0..3 are x, y, z; 3 is
    /// the devices within a chip).
    pub axes: Vec<Vec<usize>>,
    /// Physical coordinates (x, y, z, device within the chip) of each
    /// position of the mesh, in row-major order.
    pub coords: Vec<[u32; 4]>,
    /// Whether a physical axis had to be split between mesh axes.
    pub split: bool,
}

/// Physical axis sizes as JAX sees a slice: `x, y, z`, then the devices of a
/// chip when there are several.
pub fn physical_axes(shape: &[u32], devices_per_chip: u32) -> Vec<u32> {
    let mut p: Vec<u32> = (0..3).map(|a| shape.get(a).copied().unwrap_or(1)).collect();
    if devices_per_chip > 1 {
        p.push(devices_per_chip);
    }
    p
}

/// Lays `mesh` on a slice with physical axes `physical`, or says why JAX
/// would not.
pub fn lay_mesh(physical: &[u32], mesh: &[u32]) -> Result<MeshLayout, String> {
    let total = check_sizes(physical, mesh)?;
    let axes = assign_axes(physical, mesh)?;
    // The mesh is the physical array with its axes in assignment order,
    // reshaped row-major; physical axes no mesh axis took have size 1.
    let mut order: Vec<usize> = axes.iter().flatten().copied().collect();
    let untaken: Vec<usize> = (0..physical.len()).filter(|a| !order.contains(a)).collect();
    order.extend(untaken);
    let coords = (0..total)
        .map(|position| {
            let mut rest = position;
            let mut c = [0u32; 4];
            for &a in order.iter().rev() {
                let n = u64::from(physical[a]);
                c[a] = (rest % n) as u32;
                rest /= n;
            }
            c
        })
        .collect();
    Ok(MeshLayout {
        axes,
        coords,
        split: false,
    })
}

/// Lays `mesh` as [`lay_mesh`] does, or, where JAX would refuse it, with
/// physical axes split between mesh axes: each mesh axis (last first) takes
/// the factors of the free physical sizes that JAX's preference ranks first
/// (whole physical axes, then more of them, then axes earlier mesh axes use,
/// then the larger share of the first axes). A mesh axis's coordinate is
/// spread over the physical axes it uses (the first most significant); within
/// a physical axis, earlier mesh axes are the more significant part.
pub fn lay_mesh_splitting(physical: &[u32], mesh: &[u32]) -> Result<MeshLayout, String> {
    let total = check_sizes(physical, mesh)?;
    if let Ok(layout) = lay_mesh(physical, mesh) {
        return Ok(layout);
    }
    // share[i][k]: the part of physical axis i that mesh axis k takes.
    let mut share = vec![vec![1u32; mesh.len()]; physical.len()];
    for k in (0..mesh.len()).rev() {
        let used: Vec<u32> = share.iter().map(|row| row.iter().product()).collect();
        let free: Vec<u32> = physical.iter().zip(&used).map(|(&p, &u)| p / u).collect();
        let best = split_candidates(&free, mesh[k])
            .into_iter()
            .max_by_key(|z| split_preference(z, physical, &used))
            .ok_or_else(|| {
                format!(
                    "mesh axis {k} ({}) fits in no factors of the free physical axes",
                    mesh[k]
                )
            })?;
        for (i, &z) in best.iter().enumerate() {
            share[i][k] = z;
        }
    }
    let axes = (0..mesh.len())
        .map(|k| (0..physical.len()).filter(|&i| share[i][k] > 1).collect())
        .collect();
    let coords = (0..total)
        .map(|position| split_coords(position, mesh, &share))
        .collect();
    Ok(MeshLayout {
        axes,
        coords,
        split: true,
    })
}

/// Physical coordinates of mesh `position` when mesh axis `k` takes
/// `share[i][k]` of physical axis `i`.
fn split_coords(position: u64, mesh: &[u32], share: &[Vec<u32>]) -> [u32; 4] {
    // The index along each mesh axis (row-major, last axis fastest).
    let mut index = vec![0u64; mesh.len()];
    let mut rest = position;
    for k in (0..mesh.len()).rev() {
        index[k] = rest % u64::from(mesh[k]);
        rest /= u64::from(mesh[k]);
    }
    // Mesh axis k's index in digits over its physical shares, the first
    // physical axis most significant.
    let mut digit = vec![vec![0u64; mesh.len()]; share.len()];
    for k in 0..mesh.len() {
        let mut rest = index[k];
        for i in (0..share.len()).rev() {
            let n = u64::from(share[i][k]);
            digit[i][k] = rest % n;
            rest /= n;
        }
    }
    // Physical axis i's coordinate from its shares, the first mesh axis most
    // significant.
    let mut c = [0u32; 4];
    for (i, row) in share.iter().enumerate() {
        let mut v = 0u64;
        for (k, &n) in row.iter().enumerate() {
            v = v * u64::from(n) + digit[i][k];
        }
        c[i] = v as u32;
    }
    c
}

/// Every way to take `size` from the free physical sizes `free`: per prime
/// factor of `size`, which axes (with their remaining multiplicity of that
/// factor) supply it.
fn split_candidates(free: &[u32], size: u32) -> Vec<Vec<u32>> {
    let multiplicity =
        |n: u32, prime: u32| prime_factors(n).iter().filter(|&&f| f == prime).count() as u32;
    let mut primes = prime_factors(size);
    primes.dedup();
    let mut out: Vec<Vec<u32>> = vec![vec![1; free.len()]];
    for prime in primes {
        let count = multiplicity(size, prime);
        // Each axis can give `prime` as often as its free size holds it.
        let room: Vec<u32> = free.iter().map(|&f| multiplicity(f, prime)).collect();
        let mut next = Vec::new();
        for z in &out {
            distribute(prime, count, 0, &mut room.clone(), z.clone(), &mut next);
        }
        out = next;
        out.sort_unstable();
        out.dedup();
    }
    out
}

/// Adds to `out` every way to multiply `count` factors `prime` into `z` from
/// axis `from` on, at most `room[i]` into axis `i`.
fn distribute(
    prime: u32,
    count: u32,
    from: usize,
    room: &mut [u32],
    z: Vec<u32>,
    out: &mut Vec<Vec<u32>>,
) {
    if count == 0 {
        out.push(z);
        return;
    }
    for i in from..z.len() {
        if room[i] == 0 {
            continue;
        }
        room[i] -= 1;
        let mut next = z.clone();
        next[i] *= prime;
        distribute(prime, count - 1, i, room, next, out);
        room[i] += 1;
    }
}

/// JAX's ranking of a candidate share `z` (larger is preferred): the size of
/// the whole physical axes it takes, how many it takes, the size it takes from
/// axes already in use, then the share vector itself.
fn split_preference(z: &[u32], physical: &[u32], used: &[u32]) -> (u64, usize, u64, Vec<u32>) {
    let whole = |i: usize| z[i] == physical[i];
    let whole_size = (0..z.len())
        .filter(|&i| whole(i))
        .map(|i| u64::from(z[i]))
        .product();
    let whole_count = (0..z.len()).filter(|&i| whole(i) && z[i] > 1).count();
    let overlap = (0..z.len())
        .filter(|&i| used[i] > 1)
        .map(|i| u64::from(z[i]))
        .product();
    (whole_size, whole_count, overlap, z.to_vec())
}

/// The slice's device count, when `mesh` has exactly that many devices and
/// both are within what a pod can hold (at most four physical axes,
/// [`tpusim_hlo::MAX_DEVICES`] devices).
fn check_sizes(physical: &[u32], mesh: &[u32]) -> Result<u64, String> {
    let total: u64 = physical
        .iter()
        .fold(1u64, |n, &d| n.saturating_mul(u64::from(d)));
    let wanted: u64 = mesh
        .iter()
        .fold(1u64, |n, &d| n.saturating_mul(u64::from(d)));
    if physical.len() > 4 || total > tpusim_hlo::MAX_DEVICES {
        return Err(format!(
            "a slice of {total} devices on {} axes is beyond a pod",
            physical.len()
        ));
    }
    if total != wanted {
        return Err(format!("the mesh has {wanted} devices, the slice {total}"));
    }
    Ok(total)
}

/// For each mesh axis, the physical axes JAX gives it.
fn assign_axes(physical: &[u32], mesh: &[u32]) -> Result<Vec<Vec<usize>>, String> {
    let mut free: Vec<u64> = physical.iter().map(|&d| u64::from(d)).collect();
    let mut axes = vec![Vec::new(); mesh.len()];
    for (k, &size) in mesh.iter().enumerate().rev() {
        let found = (1..=free.len())
            .rev()
            .flat_map(|n| combinations(free.len(), n))
            .find(|set| set.iter().map(|&a| free[a]).product::<u64>() == u64::from(size));
        match found {
            Some(set) => {
                for &a in &set {
                    free[a] = 0;
                }
                axes[k] = set;
            }
            None if size > 1 => {
                return Err(format!(
                    "mesh axis {k} ({size}) is no product of the free physical axes {} (JAX \
                     would have to split one)",
                    free.iter()
                        .filter(|&&d| d > 0)
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join("x")
                ))
            }
            None => {}
        }
    }
    Ok(axes)
}

/// The `k`-element subsets of `0..n` in lexicographic order (as Python's
/// `itertools.combinations`); `n` is at most 4 here.
fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut set: Vec<usize> = (0..k).collect();
    if k > n {
        return out;
    }
    loop {
        out.push(set.clone());
        let Some(i) = (0..k).rev().find(|&i| set[i] < n - k + i) else {
            return out;
        };
        set[i] += 1;
        for j in i + 1..k {
            set[j] = set[j - 1] + 1;
        }
    }
}

/// The mesh one slice holds when `slices` slices share `mesh`: the slices take
/// the leading mesh positions (as `create_hybrid_device_mesh` puts the DCN
/// part of each axis before its ICI part), so they divide the leading axes.
pub fn slice_mesh(mesh: &[u32], slices: u32) -> Option<Vec<u32>> {
    let mut left = slices.max(1);
    let mut out = mesh.to_vec();
    for d in out.iter_mut() {
        if left == 1 {
            break;
        }
        if left.is_multiple_of(*d) {
            left /= *d;
            *d = 1;
        } else if d.is_multiple_of(left) {
            *d /= left;
            left = 1;
        } else {
            return None;
        }
    }
    (left == 1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_in_python_order() {
        assert_eq!(combinations(3, 2), vec![vec![0, 1], vec![0, 2], vec![1, 2]]);
        assert_eq!(combinations(3, 3), vec![vec![0, 1, 2]]);
        assert!(combinations(2, 3).is_empty());
    }

    #[test]
    fn slices_take_the_leading_axes() {
        assert_eq!(slice_mesh(&[4, 256, 1], 4), Some(vec![1, 256, 1]));
        assert_eq!(slice_mesh(&[32, 256], 4), Some(vec![8, 256]));
        assert_eq!(slice_mesh(&[2, 4, 64], 8), Some(vec![1, 1, 64]));
        assert_eq!(slice_mesh(&[3, 64], 2), None);
        assert_eq!(slice_mesh(&[8, 8], 1), Some(vec![8, 8]));
    }
}
