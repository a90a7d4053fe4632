//! The scaling book's collective cost model.
//!
//! `V` is the collective's array size per device ([`Collective::bytes`]).
//! Along one axis of `n` members every member must receive the `n − 1`
//! other shards. A closed ring of more than two members does it
//! bandwidth-optimally over both directions: `(n − 1)/2` shards per link,
//! `T = (n − 1)/n · V / W_bidi` (the book's `V / W_bidi` drops the
//! `(n − 1)/n`: it counts `n/2` whole-shard hops). A line (no wraparound),
//! and two members on one link pair, move them one way: `(n − 1)·shard / W`.
//! A group spanning several axes splits its data into one part per axis,
//! each visiting the axes in a rotated order so all links work at once; a
//! member moves its parts to the next stage together, so each stage lasts
//! as long as its slowest part and the stages add up (on equal wrapped axes
//! this is the bound `(N − 1)/N · V / (k · W_bidi)`; the book writes
//! `V / (k · W_bidi)`). Neither model ever beats
//! [`crate::bound::bandwidth_bound`].
//! Each step also costs its hops' latency; a step is latency-bound when its
//! shard is smaller than `W × hop latency` (45 kB on a v5e), and the collective
//! takes `max(latency, bandwidth)`.
//!
//! - all-gather, reduce-scatter: the time above.
//! - all-reduce: reduce-scatter + all-gather.
//! - all-to-all: the bisection of each axis, `V · n / (4 · c · W)` with
//!   `c` = 2 on a ring and 1 on a line (the book's `V·max(n)/(4·N·W_bidi)`
//!   for the whole array); the slowest axis sets the time.
//! - collective-permute: every pair routed over one minimal path per axis it
//!   moves along (the book's two ports from (0,0) to (3,3)), the load added
//!   per link: `T = max hops × latency + max link load / W`.
//! - groups spanning slices: hierarchical — reduce-scatter on ICI, the DCN
//!   exchange on `1/members-per-slice` of the data, all-gather on ICI.
//!
//! Sub-blocks at a stride `k` share each link with `k − 1` interleaved groups.
//! Groups that are not sub-blocks run one ring in group order.

use crate::collective::{Collective, CollectiveKind};
use crate::geometry::{displacement, geometry, hops, places, AxisSpan, Geometry, Link};
use crate::topology::Pod;

/// The price of one collective.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cost {
    pub time_s: f64,
    /// Time if links had no latency.
    pub bandwidth_s: f64,
    /// Time if links had infinite bandwidth.
    pub latency_s: f64,
    /// Of `time_s`, spent crossing DCN.
    pub dcn_s: f64,
    pub group_size: u32,
    pub axes: Vec<String>,
    /// Bytes each link carries per latency-bound step.
    pub bytes_per_hop: f64,
    /// Observations for hints: (kind, detail).
    pub notes: Vec<Note>,
}

/// Facts about a collective worth telling the user.
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// Spans an axis of `n` without wraparound.
    NonWrapping { axis: String, n: u32 },
    /// Latency exceeds bandwidth time.
    LatencyBound { bytes_per_hop: f64, threshold: f64 },
    /// The group is not a sub-block of the torus.
    Irregular,
    /// Spans slices.
    Dcn { slices: u32 },
    /// A device is outside the pod.
    OutsidePod,
}

/// Prices `c` on `pod` (the slowest of its groups).
pub fn cost(pod: &Pod, c: &Collective) -> Cost {
    if c.kind == CollectiveKind::CollectivePermute {
        return permute(pod, &c.pairs, c.bytes);
    }
    let mut worst: Option<Cost> = None;
    let mut seen: Vec<Vec<u32>> = Vec::new();
    for g in &c.groups {
        if g.len() < 2 {
            continue;
        }
        // Congruent groups cost the same: price each shape once.
        let key = shape_key(pod, g);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let one = group_cost(pod, c.kind, c.bytes, g);
        if worst.as_ref().is_none_or(|w| one.time_s > w.time_s) {
            worst = Some(one);
        }
    }
    worst.unwrap_or(Cost {
        group_size: 1,
        ..Cost::default()
    })
}

/// Offsets of a group's places from its first member (equal for groups that
/// are translates of each other).
fn shape_key(pod: &Pod, g: &[u32]) -> Vec<u32> {
    let Some(first) = g.first().and_then(|&d| pod.loc(d)) else {
        return g.to_vec();
    };
    g.iter()
        .map(|&d| pod.loc(d).map_or(u32::MAX, |l| l.wrapping_sub(first)))
        .collect()
}

fn group_cost(pod: &Pod, kind: CollectiveKind, v: f64, g: &[u32]) -> Cost {
    let Some(geo) = geometry(pod, g) else {
        return Cost {
            group_size: g.len() as u32,
            notes: vec![Note::OutsidePod],
            ..Cost::default()
        };
    };
    let mut notes = Vec::new();
    for a in geo.local_axes() {
        if let Link::Ici(_) = a.link {
            if !a.ring && a.n > 2 {
                notes.push(Note::NonWrapping {
                    axis: a.name().to_string(),
                    n: a.n,
                });
            }
        }
    }
    if !geo.regular {
        notes.push(Note::Irregular);
    }
    let n = f64::from(geo.size.max(1));
    let local: Vec<AxisSpan> = geo.local_axes().cloned().collect();
    // An all-reduce is a reduce-scatter and its mirror-image all-gather.
    let scatter = kind != CollectiveKind::AllGather;
    let ring_time = |bytes: f64| -> Phase {
        if geo.regular {
            gather(&local, bytes, scatter)
        } else {
            single_ring(pod, g, bytes)
        }
    };
    let mut dcn = Phase::default();
    let (ici, per_hop) = match kind {
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter => {
            if let Some(d) = geo.dcn() {
                // Exchange shards between slices, then gather within each.
                dcn = Phase {
                    bw: dcn_exchange(pod, g, kind, v, d.bw),
                    lat: d.lat,
                };
            }
            (ring_time(v), v / n)
        }
        CollectiveKind::AllReduce => {
            if let Some(d) = geo.dcn() {
                dcn = Phase {
                    bw: dcn_exchange(pod, g, kind, v, d.bw),
                    lat: 2.0 * d.lat,
                };
            }
            let half = ring_time(v);
            (
                Phase {
                    bw: 2.0 * half.bw,
                    lat: 2.0 * half.lat,
                },
                v / n,
            )
        }
        CollectiveKind::AllToAll => {
            if let Some(d) = geo.dcn() {
                dcn = Phase {
                    bw: dcn_exchange(pod, g, kind, v, d.bw),
                    lat: d.lat,
                };
            }
            let per_byte = all_to_all(&local);
            let mut ici = Phase {
                bw: v * per_byte.bw,
                lat: per_byte.lat,
            };
            if !geo.regular {
                // The bisection formula assumes a sub-block: route every
                // pair as the simulation does and take the busiest link.
                ici.bw = irregular_all_to_all(pod, g, v);
            }
            (ici, v / n)
        }
        CollectiveKind::CollectivePermute => (Phase::default(), v),
    };
    let threshold = local.iter().map(|a| a.bw * a.lat).fold(0.0, f64::max);
    if ici.lat > ici.bw && ici.lat > 0.0 {
        notes.push(Note::LatencyBound {
            bytes_per_hop: per_hop,
            threshold,
        });
    }
    if geo.slices > 1 {
        notes.push(Note::Dcn { slices: geo.slices });
    }
    let dcn_s = dcn.time();
    Cost {
        time_s: ici.time() + dcn_s,
        bandwidth_s: ici.bw + dcn.bw,
        latency_s: ici.lat + dcn.lat,
        dcn_s,
        group_size: geo.size,
        axes: axes_of(&geo),
        bytes_per_hop: per_hop,
        notes,
    }
}

/// Bandwidth time of the DCN exchange: the slowest slice's member chips
/// move, each over its one DCN link, the bytes its `m` of the group's `n`
/// members exchange with the other slices: the other slices' shards for a
/// gather or scatter (`(n − m)/n · V`; `(k − 1)` shards per chip on `k`
/// equal slices), twice that for an all-reduce (a reduce-scatter and an
/// all-gather of the slice's part, `2 (k − 1)/k` of it), and each member's
/// chunks for the other slices' members for an all-to-all.
fn dcn_exchange(pod: &Pod, g: &[u32], kind: CollectiveKind, v: f64, bw: f64) -> f64 {
    let Some(ps) = places(pod, g) else {
        return 0.0;
    };
    let n = ps.len() as f64;
    let mut slices: Vec<(u32, u32)> = ps.iter().map(|p| (p.slice, p.chip)).collect();
    slices.sort_unstable();
    let mut worst = 0.0f64;
    for run in slices.chunk_by(|a, b| a.0 == b.0) {
        let m = run.len() as f64;
        let chips = run.chunk_by(|a, b| a.1 == b.1).count() as f64;
        let outside = (n - m).max(0.0);
        let bytes = match kind {
            CollectiveKind::AllReduce => 2.0 * outside / n * v,
            CollectiveKind::AllToAll => m * outside / n * v,
            _ => outside / n * v,
        };
        worst = worst.max(bytes / (chips * bw));
    }
    worst
}

fn axes_of(geo: &Geometry) -> Vec<String> {
    geo.axis_names()
}

/// Bandwidth and latency terms of one phase.
#[derive(Clone, Copy, Debug, Default)]
struct Phase {
    bw: f64,
    lat: f64,
}

impl Phase {
    fn time(self) -> f64 {
        self.bw.max(self.lat)
    }
}

/// Gathering (or scattering, `scatter`) `v` bytes over `axes` at once, as
/// the simulation runs it: the data is split into one part per axis, each
/// part visiting the axes in a rotated order, so every axis works all the
/// time; a part's chunk grows by each axis it has gathered over. A member
/// moves all its parts to their next stage together (that keeps two parts
/// off one axis), so each stage lasts as long as its slowest part and the
/// stages add up.
fn gather(axes: &[AxisSpan], v: f64, scatter: bool) -> Phase {
    let axes: Vec<&AxisSpan> = axes.iter().filter(|a| a.n > 1).collect();
    let k = axes.len();
    let lat = axes
        .iter()
        .map(|a| f64::from(a.steps()) * f64::from(a.stride) * a.lat)
        .sum();
    if k == 0 {
        return Phase { bw: 0.0, lat };
    }
    let members: f64 = axes.iter().map(|a| f64::from(a.n)).product();
    let mut slowest = vec![0.0f64; k];
    for part in 0..k {
        // A gather's chunk grows by each axis it has crossed; a scatter
        // visits the same order with its chunk shrinking.
        let mut chunk = if scatter {
            v / k as f64
        } else {
            v / k as f64 / members
        };
        for (stage, slowest) in slowest.iter_mut().enumerate() {
            let i = (stage + part) % k;
            let n = f64::from(axes[i].n);
            if scatter {
                chunk /= n;
                *slowest = slowest.max(axes[i].gather_time(chunk));
            } else {
                *slowest = slowest.max(axes[i].gather_time(chunk));
                chunk *= n;
            }
        }
    }
    Phase {
        bw: slowest.into_iter().sum(),
        lat,
    }
}

/// A group that is not a sub-block: one bidirectional ring in group order,
/// each step as slow as its longest neighbour route.
fn single_ring(pod: &Pod, g: &[u32], v: f64) -> Phase {
    let Some(ps) = places(pod, g) else {
        return Phase::default();
    };
    let n = ps.len();
    let mut worst_hops = 0u32;
    let mut crosses_slices = false;
    for k in 0..n {
        let (a, b) = (&ps[k], &ps[(k + 1) % n]);
        if a.slice != b.slice {
            crosses_slices = true;
        } else {
            worst_hops = worst_hops.max(hops(pod, a, b).max(1));
        }
    }
    let steps = (n / 2) as f64;
    let lat = if crosses_slices {
        pod.dcn_latency_s
    } else {
        f64::from(worst_hops) * pod.hop_latency_s
    };
    Phase {
        bw: ring_link_load(pod, g, v),
        lat: steps * lat,
    }
}

/// Bandwidth time of a bandwidth-optimal bidirectional ring in group order:
/// every ring edge carries `(n − 1)/2` shards each way (an even ring sends
/// its farthest shard half each way) over the routes the simulation takes;
/// the busiest link sets the time (routes of several edges may share it,
/// and both ways may share one link, as on an axis of two).
fn ring_link_load(pod: &Pod, g: &[u32], v: f64) -> f64 {
    let locs: Option<Vec<u32>> = g.iter().map(|&d| pod.loc(d)).collect();
    let Some(locs) = locs else {
        return 0.0;
    };
    let n = locs.len();
    let per_edge = (n.saturating_sub(1)) as f64 / 2.0 * v / n.max(1) as f64;
    let mut load: std::collections::HashMap<u32, f64> = std::collections::HashMap::new();
    let mut route = Vec::new();
    for k in 0..n {
        let (a, b) = (locs[k], locs[(k + 1) % n]);
        for (from, to) in [(a, b), (b, a)] {
            route.clear();
            crate::sim::route(pod, from, to, 0, &mut route);
            for &l in &route {
                *load.entry(l).or_default() += per_edge / crate::sim::link_bandwidth(pod, l);
            }
        }
    }
    load.values().copied().fold(0.0, f64::max)
}

/// Largest group whose all-to-all over an irregular group is routed pair by
/// pair (n² routes); larger ones are priced at their bandwidth bound.
const MAX_ROUTED_ALL_TO_ALL: usize = 256;

/// Bandwidth time of an all-to-all over a group that is not a sub-block:
/// every pair's `V/n` routed over one minimal path per axis it moves along,
/// the busiest link's load; beyond [`MAX_ROUTED_ALL_TO_ALL`] members, the
/// links' bandwidth bound.
fn irregular_all_to_all(pod: &Pod, g: &[u32], v: f64) -> f64 {
    let n = g.len();
    let c = Collective {
        kind: CollectiveKind::AllToAll,
        op: tpusim_hlo::InstrId(0),
        bytes: v,
        groups: vec![g.to_vec()],
        pairs: Vec::new(),
    };
    if n > MAX_ROUTED_ALL_TO_ALL {
        return crate::bound::bandwidth_bound(pod, &c);
    }
    let pairs: Vec<(u32, u32)> = g
        .iter()
        .flat_map(|&a| g.iter().filter(move |&&b| b != a).map(move |&b| (a, b)))
        .collect();
    permute(pod, &pairs, v / n as f64).bandwidth_s
}

/// All-to-all over `axes`, per byte of `V` (multiply by `V`).
fn all_to_all(axes: &[AxisSpan]) -> Phase {
    let bw = axes
        .iter()
        .map(|a| {
            let c = if a.ring { 2.0 } else { 1.0 };
            f64::from(a.n) * a.share() / (4.0 * c * a.bw)
        })
        .fold(0.0, f64::max);
    let lat = axes
        .iter()
        .map(|a| {
            let far = if a.ring { a.n / 2 } else { a.n - 1 };
            f64::from(far * a.stride) * a.lat
        })
        .sum();
    Phase { bw, lat }
}

/// Point-to-point transfers of `bytes` each, routed over one minimal path per
/// axis of movement, with every link's load added up.
pub fn permute(pod: &Pod, pairs: &[(u32, u32)], bytes: f64) -> Cost {
    let mut load = vec![0.0f64; crate::sim::link_count(pod)];
    // Per link: the shortest route latency of the transfers through it (the
    // last one it serves can be the nearest).
    let mut lat_through = vec![f64::INFINITY; load.len()];
    let mut route = Vec::new();
    let mut max_lat = 0.0f64;
    let mut notes = Vec::new();
    let mut dcn = false;
    let mut axes_used = [false; 3];
    for &(s, t) in pairs {
        let (Some(a), Some(b)) = (pod.loc(s), pod.loc(t)) else {
            notes.push(Note::OutsidePod);
            continue;
        };
        if a == b {
            continue;
        }
        let paths = crate::sim::paths(pod, a, b);
        let share = bytes / paths as f64;
        for p in 0..paths {
            route.clear();
            crate::sim::route(pod, a, b, p, &mut route);
            let mut lat = 0.0;
            for &l in &route {
                load[l as usize] += share;
                lat += crate::sim::link_latency(pod, l);
            }
            for &l in &route {
                lat_through[l as usize] = lat_through[l as usize].min(lat);
            }
            max_lat = max_lat.max(lat);
        }
        let (pa, pb) = (pod.place(a), pod.place(b));
        dcn |= pa.slice != pb.slice;
        for (k, used) in axes_used.iter_mut().enumerate().take(pod.axes()) {
            *used |= displacement(pod, k, pa.coords[k], pb.coords[k]) != 0;
        }
    }
    let bw = load
        .iter()
        .enumerate()
        .map(|(l, &x)| x / crate::sim::link_bandwidth(pod, l as u32))
        .fold(0.0, f64::max);
    let mut axes: Vec<String> = (0..pod.axes())
        .filter(|&k| axes_used[k])
        .map(|k| crate::geometry::AXIS_NAMES[k].to_string())
        .collect();
    if dcn {
        axes.push("dcn".into());
        notes.push(Note::Dcn { slices: pod.slices });
    }
    // Cut-through: a link finishes its load one route latency after the
    // transfers through it start; the slowest link sets the time.
    let time_s = load
        .iter()
        .zip(&lat_through)
        .enumerate()
        .filter(|(_, (&x, _))| x > 0.0)
        .map(|(l, (&x, &lat))| x / crate::sim::link_bandwidth(pod, l as u32) + lat)
        .fold(max_lat, f64::max);
    let threshold = pod.link_bw * pod.hop_latency_s;
    if max_lat > bw && max_lat > 0.0 {
        notes.push(Note::LatencyBound {
            bytes_per_hop: bytes,
            threshold,
        });
    }
    Cost {
        time_s,
        bandwidth_s: bw,
        latency_s: max_lat,
        dcn_s: 0.0,
        group_size: 2,
        axes,
        bytes_per_hop: bytes,
        notes,
    }
}
