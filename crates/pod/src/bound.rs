//! The links' bandwidth bound: the least time any algorithm needs to move a
//! collective's bytes over the links its groups route on.
//!
//! Both network models route a group only along the torus axes it spans
//! (plus DCN when it spans slices), so those are the links available to it.
//! The bound is the largest of:
//!
//! - **per chip, each way**: bytes that must enter (leave) a chip over the
//!   links available to its members, divided by their bandwidth. A member of
//!   a group of `N` receives the `N − 1` shards it lacks in an all-gather
//!   (`(N − 1)/N · V`), sends as much in a reduce-scatter, both in an
//!   all-reduce (Patarasuk & Yuan's `2 (N − 1)/N · V`), and `(N − 1)/N · V`
//!   each way in an all-to-all; devices of one chip count once (`N − m`
//!   shards for `m` members on the chip). A chip has one inbound and one
//!   outbound link per neighbour along each spanned axis: two on a wrapped
//!   axis longer than two, one at the end of a line or on an axis of two.
//! - **per cut of one axis** (groups inside one slice): a ring cut into two
//!   halves at two links per line and direction, a line at one; the bytes
//!   that must cross from one side to the other — each shard once for a
//!   gather or scatter (it can be copied or reduced past the cut), the whole
//!   array for an all-reduce, every pair's chunk for an all-to-all — over
//!   the cut links of every line of the slice.
//! - **per slice** (groups spanning slices): the same crossing bytes over the
//!   DCN links of the slice's member chips.
//!
//! Latency is not part of the bound.

use crate::collective::{Collective, CollectiveKind};
use crate::geometry::{geometry, Link};
use crate::topology::{Pod, MAX_AXES};
use std::collections::HashMap;

/// The bandwidth bound of `c` on `pod`, in seconds (0 when nothing must move
/// or a device is outside the pod).
pub fn bandwidth_bound(pod: &Pod, c: &Collective) -> f64 {
    let mut chips = ChipLoads::default();
    if c.kind == CollectiveKind::CollectivePermute {
        permute_loads(pod, c, &mut chips);
        return chips.time(pod);
    }
    let mut cuts = 0.0f64;
    let mut slice_loads: HashMap<u32, SliceLoad> = HashMap::new();
    for g in &c.groups {
        if g.len() < 2 {
            continue;
        }
        let Some(geo) = geometry(pod, g) else {
            return 0.0;
        };
        let mut axes = [false; MAX_AXES];
        for a in &geo.axes {
            if let Link::Ici(k) = a.link {
                axes[k] = true;
            }
        }
        let locs: Vec<u32> = g.iter().filter_map(|&d| pod.loc(d)).collect();
        let n = locs.len() as f64;
        let mut per_chip: HashMap<u32, (f64, u32)> = HashMap::new();
        for &l in &locs {
            per_chip.entry(pod.global_chip(l)).or_insert((0.0, l)).0 += 1.0;
        }
        for &(m, loc) in per_chip.values() {
            let (inb, out) = member_bytes(c.kind, c.bytes, n, m);
            chips.add(pod, loc, inb, out, axes, geo.slices > 1);
        }
        if geo.slices > 1 {
            let mut per_slice: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
            for &l in &locs {
                let e = per_slice.entry(pod.place(l).slice).or_default();
                e.0 += 1.0;
                e.1.push(pod.global_chip(l));
            }
            for (s, (m, mut member_chips)) in per_slice {
                let (inb, out) = crossing_bytes(c.kind, c.bytes, n, m);
                let load = slice_loads.entry(s).or_default();
                load.inbound += inb;
                load.outbound += out;
                load.chips.append(&mut member_chips);
            }
        }
    }
    for (_, mut load) in slice_loads {
        load.chips.sort_unstable();
        load.chips.dedup();
        let cap = load.chips.len() as f64 * pod.dcn_bw;
        if cap > 0.0 {
            cuts = cuts.max(load.inbound.max(load.outbound) / cap);
        }
    }
    for axis in 0..pod.axes() {
        cuts = cuts.max(axis_cut_time(pod, c, axis));
    }
    chips.time(pod).max(cuts)
}

/// Bytes a chip holding `m` of a group's `n` members must receive and send.
fn member_bytes(kind: CollectiveKind, v: f64, n: f64, m: f64) -> (f64, f64) {
    let outside = (n - m).max(0.0);
    match kind {
        CollectiveKind::AllGather => (outside * v / n, m * v / n * f64::from(outside > 0.0)),
        CollectiveKind::ReduceScatter => (m * v / n * f64::from(outside > 0.0), outside * v / n),
        CollectiveKind::AllReduce => (2.0 * outside * v / n, 2.0 * outside * v / n),
        CollectiveKind::AllToAll | CollectiveKind::CollectivePermute => {
            (m * outside * v / n, m * outside * v / n)
        }
    }
}

/// Bytes that must cross into and out of a set holding `a` of a group's `n`
/// members: shards once (copies and partial sums are made past the cut),
/// the whole array for an all-reduce, every pair's chunk for an all-to-all.
fn crossing_bytes(kind: CollectiveKind, v: f64, n: f64, a: f64) -> (f64, f64) {
    let b = (n - a).max(0.0);
    let both = f64::from(a > 0.0 && b > 0.0);
    match kind {
        CollectiveKind::AllGather => (both * b * v / n, both * a * v / n),
        CollectiveKind::ReduceScatter => (both * a * v / n, both * b * v / n),
        CollectiveKind::AllReduce => (both * v, both * v),
        CollectiveKind::AllToAll | CollectiveKind::CollectivePermute => {
            (a * b * v / n, a * b * v / n)
        }
    }
}

#[derive(Default)]
struct SliceLoad {
    inbound: f64,
    outbound: f64,
    chips: Vec<u32>,
}

/// Per chip: bytes in, bytes out, the ICI axes its groups span, and whether
/// they cross DCN.
#[derive(Default)]
struct ChipLoads {
    loads: HashMap<u32, ChipLoad>,
}

/// Bytes in, bytes out, spanned ICI axes, crossing DCN, the chip's coordinates.
type ChipLoad = (f64, f64, [bool; MAX_AXES], bool, [u32; MAX_AXES]);

impl ChipLoads {
    fn add(&mut self, pod: &Pod, loc: u32, inb: f64, out: f64, axes: [bool; MAX_AXES], dcn: bool) {
        let e = self.loads.entry(pod.global_chip(loc)).or_default();
        e.4 = pod.place(loc).coords;
        e.0 += inb;
        e.1 += out;
        for (have, new) in e.2.iter_mut().zip(axes) {
            *have |= new;
        }
        e.3 |= dcn;
    }

    /// The slowest chip's time to take in or send out its bytes.
    fn time(&self, pod: &Pod) -> f64 {
        self.loads
            .values()
            .map(|&(inb, out, axes, dcn, coords)| {
                let links: u32 = (0..pod.axes())
                    .filter(|&k| axes[k])
                    .map(|k| neighbours(pod, k, coords[k]))
                    .sum();
                let cap = f64::from(links) * pod.link_bw + if dcn { pod.dcn_bw } else { 0.0 };
                if cap > 0.0 {
                    inb.max(out) / cap
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    }
}

/// Distinct neighbours of coordinate `x` along `axis` (one link each way).
fn neighbours(pod: &Pod, axis: usize, x: u32) -> u32 {
    let len = pod.shape[axis];
    if len < 2 {
        0
    } else if pod.wraps[axis] && len > 2 {
        2
    } else {
        u32::from(x > 0) + u32::from(x + 1 < len)
    }
}

/// Point-to-point bytes out of each source chip and into each target chip,
/// over all their links (a permute may route along any axis).
fn permute_loads(pod: &Pod, c: &Collective, chips: &mut ChipLoads) {
    let all = [true; MAX_AXES];
    for &(s, t) in &c.pairs {
        let (Some(a), Some(b)) = (pod.loc(s), pod.loc(t)) else {
            continue;
        };
        if pod.global_chip(a) == pod.global_chip(b) {
            continue;
        }
        let dcn = pod.place(a).slice != pod.place(b).slice;
        chips.add(pod, a, 0.0, c.bytes, all, dcn);
        chips.add(pod, b, c.bytes, 0.0, all, dcn);
    }
}

/// The slowest cut of `axis` for the groups that lie inside one slice.
fn axis_cut_time(pod: &Pod, c: &Collective, axis: usize) -> f64 {
    let len = pod.shape[axis] as usize;
    if len < 2 {
        return 0.0;
    }
    let ring = pod.wraps[axis] && len > 2;
    // Cut sets: a half ring starting at each position, or each prefix of a line.
    let sets: Vec<(usize, usize)> = if ring {
        (0..len).map(|s| (s, len / 2)).collect()
    } else {
        (1..len).map(|s| (0, s)).collect()
    };
    let inside = |x: usize, (start, width): (usize, usize)| (x + len - start) % len < width;
    // Per slice, per cut set: bytes in and out.
    let mut crossing: HashMap<u32, Vec<(f64, f64)>> = HashMap::new();
    for g in &c.groups {
        if g.len() < 2 {
            continue;
        }
        let Some(places) = crate::geometry::places(pod, g) else {
            return 0.0;
        };
        if places.iter().any(|p| p.slice != places[0].slice) {
            continue;
        }
        let mut hist = vec![0u32; len];
        for p in &places {
            hist[p.coords[axis] as usize] += 1;
        }
        let n = places.len() as f64;
        let slice = crossing
            .entry(places[0].slice)
            .or_insert_with(|| vec![(0.0, 0.0); sets.len()]);
        for (k, &set) in sets.iter().enumerate() {
            let a: u32 = (0..len).filter(|&x| inside(x, set)).map(|x| hist[x]).sum();
            let (inb, out) = crossing_bytes(c.kind, c.bytes, n, f64::from(a));
            slice[k].0 += inb;
            slice[k].1 += out;
        }
    }
    let lines = f64::from(pod.chips_per_slice() / pod.shape[axis]);
    let links_per_line = if ring { 2.0 } else { 1.0 };
    let cap = lines * links_per_line * pod.link_bw;
    crossing
        .values()
        .flatten()
        .map(|&(i, o)| i.max(o) / cap)
        .fold(0.0, f64::max)
}
