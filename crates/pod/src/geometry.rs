//! How a group of devices lies on the pod: the axes it spans, how many
//! members along each, whether they close a ring, and the hop stride.

use crate::topology::{Place, Pod, MAX_AXES};

/// Names of the torus axes in reports.
pub const AXIS_NAMES: [&str; MAX_AXES] = ["x", "y", "z"];

/// The kind of link an axis uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// ICI along torus axis `a`.
    Ici(usize),
    /// Between the devices of one chip.
    Core,
    /// Between slices, over the data-centre network.
    Dcn,
}

/// One axis a group spans.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisSpan {
    pub link: Link,
    /// Members along the axis.
    pub n: u32,
    /// Whether the members close a ring (the axis wraps and the group covers
    /// it at a regular stride; DCN is a switch, so always).
    pub ring: bool,
    /// Hops between neighbouring members.
    pub stride: u32,
    /// Length of the whole axis.
    pub axis_len: u32,
    /// Bandwidth of one link, one direction, bytes/s.
    pub bw: f64,
    /// Latency per hop, seconds.
    pub lat: f64,
    /// Members of the group on each chip that use this axis's links at once
    /// (the group's devices per chip for ICI axes, else 1).
    pub per_chip: u32,
}

impl AxisSpan {
    pub fn name(&self) -> &'static str {
        match self.link {
            Link::Ici(a) => AXIS_NAMES[a],
            Link::Core => "core",
            Link::Dcn => "dcn",
        }
    }

    /// Steps (hops in sequence) of a bidirectional ring over this axis: a
    /// shard moves one neighbour per step in each direction.
    pub fn steps(&self) -> u32 {
        if self.ring {
            self.n / 2
        } else {
            self.n.saturating_sub(1)
        }
    }

    /// Directions a gather over this axis uses at once: both ways round a
    /// closed ring of more than two members; one link pair otherwise (a line
    /// sends each shard one way, and two members share a single route).
    pub fn directions(&self) -> f64 {
        if self.ring && self.n > 2 {
            2.0
        } else {
            1.0
        }
    }

    /// Bandwidth time of gathering over this axis alone when each member
    /// holds `chunk` bytes and ends with `n · chunk`: the bandwidth-optimal
    /// ring moves `(n − 1)` chunks into each member, split over its
    /// directions (each even ring's farthest chunk goes half each way).
    pub fn gather_time(&self, chunk: f64) -> f64 {
        f64::from(self.n.saturating_sub(1)) * chunk * self.share() / (self.directions() * self.bw)
    }

    /// Rings that share each link of this axis: with stride `k`, `k`
    /// interleaved groups use the same links at once, and each of the
    /// group's devices on a chip runs its own ring over the chip's links.
    pub fn share(&self) -> f64 {
        f64::from(self.stride.max(1)) * f64::from(self.per_chip.max(1))
    }
}

/// A group's shape on the pod.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    pub size: u32,
    /// Spanned axes (n > 1): ICI axes in order, then `core`, then `dcn`.
    pub axes: Vec<AxisSpan>,
    /// Whether the group is a full product of its axes (a sub-block).
    pub regular: bool,
    /// Slices spanned.
    pub slices: u32,
}

impl Geometry {
    pub fn axis_names(&self) -> Vec<String> {
        self.axes.iter().map(|a| a.name().to_string()).collect()
    }

    /// Axes inside one slice (ICI and on-chip).
    pub fn local_axes(&self) -> impl Iterator<Item = &AxisSpan> {
        self.axes.iter().filter(|a| a.link != Link::Dcn)
    }

    pub fn dcn(&self) -> Option<&AxisSpan> {
        self.axes.iter().find(|a| a.link == Link::Dcn)
    }

    /// Members within one slice.
    pub fn per_slice(&self) -> u32 {
        (self.size / self.slices.max(1)).max(1)
    }
}

/// Places of a group's devices (`None` when one is outside the pod).
pub fn places(pod: &Pod, group: &[u32]) -> Option<Vec<Place>> {
    group
        .iter()
        .map(|&d| pod.loc(d).map(|l| pod.place(l)))
        .collect()
}

fn distinct(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v.dedup();
    v
}

/// The geometry of `group` (`None` when a device is outside the pod).
pub fn geometry(pod: &Pod, group: &[u32]) -> Option<Geometry> {
    let ps = places(pod, group)?;
    // Distinct values per dimension over all members: the group is a
    // sub-block when it is their full product.
    let slices = distinct(ps.iter().map(|p| p.slice).collect());
    let cores = distinct(ps.iter().map(|p| p.core).collect());
    let mut axes = Vec::new();
    let mut product = slices.len() as u64 * cores.len() as u64;
    for a in 0..pod.axes() {
        let vals = distinct(ps.iter().map(|p| p.coords[a]).collect());
        product *= vals.len() as u64;
        if vals.len() < 2 {
            continue;
        }
        let diffs: Vec<u32> = vals.windows(2).map(|w| w[1] - w[0]).collect();
        let stride = diffs[0];
        let uniform = diffs.iter().all(|&d| d == stride);
        let n = vals.len() as u32;
        let len = pod.shape[a];
        axes.push(AxisSpan {
            link: Link::Ici(a),
            n,
            ring: pod.wraps[a] && uniform && n * stride == len,
            stride: if uniform {
                stride
            } else {
                diffs.iter().copied().max().unwrap_or(1)
            },
            axis_len: len,
            bw: pod.link_bw,
            lat: pod.hop_latency_s,
            per_chip: cores.len() as u32,
        });
    }
    if cores.len() > 1 {
        axes.push(AxisSpan {
            link: Link::Core,
            n: cores.len() as u32,
            ring: false,
            stride: 1,
            axis_len: pod.devices_per_chip,
            bw: pod.onchip_bw,
            lat: 0.0,
            per_chip: 1,
        });
    }
    if slices.len() > 1 {
        axes.push(AxisSpan {
            link: Link::Dcn,
            n: slices.len() as u32,
            ring: true,
            stride: 1,
            axis_len: pod.slices,
            bw: pod.dcn_bw,
            lat: pod.dcn_latency_s,
            per_chip: 1,
        });
    }
    let unique = distinct(group.to_vec()).len() == group.len();
    Some(Geometry {
        size: group.len() as u32,
        axes,
        regular: unique && product == group.len() as u64,
        slices: slices.len() as u32,
    })
}

/// Signed shortest displacement from `a` to `b` along axis `axis`: positive
/// means towards higher coordinates (through the wraparound when shorter).
pub fn displacement(pod: &Pod, axis: usize, a: u32, b: u32) -> i64 {
    let len = i64::from(pod.shape[axis]);
    let d = i64::from(b) - i64::from(a);
    if !pod.wraps[axis] || d == 0 {
        return d;
    }
    let fwd = d.rem_euclid(len);
    if fwd <= len - fwd {
        fwd
    } else {
        fwd - len
    }
}

/// ICI hops between two places of one slice.
pub fn hops(pod: &Pod, a: &Place, b: &Place) -> u32 {
    (0..pod.axes())
        .map(|k| displacement(pod, k, a.coords[k], b.coords[k]).unsigned_abs() as u32)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpusim_arch::by_id;

    #[test]
    fn rows_columns_and_strides() {
        let pod = Pod::for_chip(&by_id("v5e").unwrap(), &[8, 4], 1).unwrap();
        // A row along x: 8 members, no wraparound on v5e below 16.
        let g = geometry(&pod, &(0..8).collect::<Vec<_>>()).unwrap();
        assert_eq!(g.axis_names(), vec!["x"]);
        assert!(g.regular && !g.axes[0].ring);
        assert_eq!(g.axes[0].steps(), 7);
        // A column along y: ids 0, 8, 16, 24.
        let g = geometry(&pod, &[0, 8, 16, 24]).unwrap();
        assert_eq!((g.axis_names(), g.axes[0].n), (vec!["y".to_string()], 4));
        // Every other chip of a row: stride 2.
        let g = geometry(&pod, &[0, 2, 4, 6]).unwrap();
        assert_eq!(g.axes[0].stride, 2);
        // An L shape is not a sub-block.
        assert!(!geometry(&pod, &[0, 1, 8]).unwrap().regular);
        let v5p = Pod::for_chip(&by_id("v5p").unwrap(), &[4, 4, 4], 2).unwrap();
        let g = geometry(&v5p, &(0..128).collect::<Vec<_>>()).unwrap();
        assert_eq!(g.axis_names(), vec!["x", "y", "z", "dcn"]);
        assert!(g.axes.iter().all(|a| a.ring));
        assert_eq!(g.per_slice(), 64);
    }

    #[test]
    fn shortest_way_round() {
        let pod = Pod::for_chip(&by_id("v5p").unwrap(), &[4, 4, 4], 1).unwrap();
        assert_eq!(displacement(&pod, 0, 0, 3), -1);
        assert_eq!(displacement(&pod, 0, 3, 0), 1);
        let mesh = Pod::for_chip(&by_id("v5e").unwrap(), &[4, 4], 1).unwrap();
        assert_eq!(displacement(&mesh, 0, 0, 3), 3);
        assert_eq!(hops(&mesh, &mesh.place(0), &mesh.place(15)), 6);
    }
}
