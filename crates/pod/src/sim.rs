//! Link-level, event-driven network simulation.
//!
//! Every ICI link direction of every chip, every chip's on-chip path between
//! its devices and every chip's DCN uplink and downlink is a resource that
//! carries one transfer at a time, in the order transfers are issued (FIFO).
//! A transfer is routed dimension by dimension (the shortest way round a
//! wrapping axis) and cut through: it holds each link for `bytes / bandwidth`,
//! and its head reaches the next link one hop latency after it started on
//! the previous one. Events (arrivals) are processed in time order, so
//! transfers are issued in time order too.
//!
//! Collectives run as the analytical model describes them, but with every
//! step simulated: ring algorithms move whole shards one neighbour per step in
//! both directions (an even closed ring sends its farthest shard half each
//! way, so every link carries `(n − 1)/2` shards), a step at a device waits for the shard it forwards, and a
//! device enters its next phase (axis) as soon as its own phase is done.
//! Multi-axis groups split their data into one part per axis, each part
//! visiting the axes in a rotated order, so all axes' links work at once; a
//! device moves its parts to their next axes together.
//! Groups that are not sub-blocks run one ring in group order. Permutes and
//! all-to-alls send every pair's bytes at once over one path per axis moved.

use crate::collective::{Collective, CollectiveKind};
use crate::geometry::{displacement, geometry, Geometry, Link};
use crate::radix::RadixHeap;
use crate::topology::Pod;
use tpusim_hlo::Cancel;

/// Events a simulation processes between two looks at its cancel flag (a
/// power of two: the check is a mask).
const CANCEL_EVERY: u32 = 4096;

/// Largest number of point-to-point transfers a simulation issues at once;
/// beyond it [`simulate`] declines (the caller uses the analytical model).
pub const MAX_TRANSFERS: usize = 1 << 22;

/// Outcome of one simulated collective.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    pub time_s: f64,
    /// Link traversals simulated.
    pub transfers: u64,
}

/// Number of link resources in `pod`.
pub fn link_count(pod: &Pod) -> usize {
    let chips = pod.chips() as usize;
    chips * (2 * pod.axes() + 4)
}

fn ici_link(pod: &Pod, chip: u32, axis: usize, dir: usize) -> u32 {
    chip * (2 * pod.axes() as u32) + (axis * 2 + dir) as u32
}

fn core_link(pod: &Pod, chip: u32, dir: usize) -> u32 {
    (pod.chips() as u32) * (2 * pod.axes() as u32) + chip * 2 + dir as u32
}

fn dcn_link(pod: &Pod, chip: u32, inbound: bool) -> u32 {
    (pod.chips() as u32) * (2 * pod.axes() as u32 + 2) + chip * 2 + u32::from(inbound)
}

#[derive(Clone, Copy, PartialEq)]
enum LinkKind {
    Ici,
    Core,
    Dcn,
}

fn kind_of(pod: &Pod, l: u32) -> LinkKind {
    let chips = pod.chips() as u32;
    let ici = chips * 2 * pod.axes() as u32;
    if l < ici {
        LinkKind::Ici
    } else if l < ici + 2 * chips {
        LinkKind::Core
    } else {
        LinkKind::Dcn
    }
}

/// One direction's bandwidth of link `l`, bytes/s.
pub fn link_bandwidth(pod: &Pod, l: u32) -> f64 {
    match kind_of(pod, l) {
        LinkKind::Ici => pod.link_bw,
        LinkKind::Core => pod.onchip_bw,
        LinkKind::Dcn => pod.dcn_bw,
    }
}

/// Latency of link `l` (a DCN crossing charges it on the uplink only).
pub fn link_latency(pod: &Pod, l: u32) -> f64 {
    match kind_of(pod, l) {
        LinkKind::Ici => pod.hop_latency_s,
        LinkKind::Core => 0.0,
        LinkKind::Dcn if l.is_multiple_of(2) => pod.dcn_latency_s,
        LinkKind::Dcn => 0.0,
    }
}

/// Minimal paths used between two locations: one per ICI axis the transfer
/// moves along (at least one), each taken both ways round along every axis
/// where both ways are equally short (half a wrapped ring away).
pub fn paths(pod: &Pod, a: u32, b: u32) -> usize {
    let (pa, pb) = (pod.place(a), pod.place(b));
    if pa.slice != pb.slice {
        return 1;
    }
    let moving = (0..pod.axes())
        .filter(|&k| pa.coords[k] != pb.coords[k])
        .count()
        .max(1);
    moving << ties(pod, &pa.coords, &pb.coords).count_ones()
}

/// Axes (bit per axis) where `b` is exactly half a wrapped ring from `a`.
fn ties(pod: &Pod, a: &[u32; 3], b: &[u32; 3]) -> u32 {
    (0..pod.axes())
        .filter(|&k| {
            let len = pod.shape[k];
            pod.wraps[k] && len > 2 && len.is_multiple_of(2) && a[k].abs_diff(b[k]) == len / 2
        })
        .fold(0, |m, k| m | 1 << k)
}

/// The tie axes (bit per axis) that path `path` of `moving` takes the
/// negative way round: the bits of `path / moving` spread over `ties`.
fn flips(ties: u32, path: usize, moving: usize) -> u32 {
    let mut choice = path / moving.max(1);
    let mut out = 0;
    for k in 0..3 {
        if ties & (1 << k) != 0 {
            if choice & 1 == 1 {
                out |= 1 << k;
            }
            choice >>= 1;
        }
    }
    out
}

/// Direction (0 up, 1 down) along `axis` from `x` to `y`, flipped on a tie
/// when asked.
fn direction(pod: &Pod, axis: usize, x: u32, y: u32, flip: u32) -> (usize, u64) {
    let d = displacement(pod, axis, x, y);
    let tie = pod.wraps[axis] && 2 * d.unsigned_abs() == u64::from(pod.shape[axis]);
    let dir = usize::from(d < 0) ^ usize::from(tie && flip & (1 << axis) != 0);
    (dir, d.unsigned_abs())
}

/// Appends the links from `a` to `b` to `out`: over DCN between slices, on
/// chip between devices of one chip, else dimension-ordered over ICI, the
/// axes that move taken in an order rotated by `path` (and tie axes the
/// way [`paths`] numbers them).
pub fn route(pod: &Pod, a: u32, b: u32, path: usize, out: &mut Vec<u32>) {
    let (pa, pb) = (pod.place(a), pod.place(b));
    if pa.slice != pb.slice {
        out.push(dcn_link(pod, pod.global_chip(a), false));
        out.push(dcn_link(pod, pod.global_chip(b), true));
        return;
    }
    if pa.chip == pb.chip {
        if pa.core != pb.core {
            out.push(core_link(
                pod,
                pod.global_chip(a),
                usize::from(pa.core > pb.core),
            ));
        }
        return;
    }
    let mut moving = [0usize; 3];
    let mut k = 0;
    for axis in 0..pod.axes() {
        if pa.coords[axis] != pb.coords[axis] {
            moving[k] = axis;
            k += 1;
        }
    }
    let mut at = pa;
    let base = pod.global_chip(a) - pa.chip;
    let flip = flips(ties(pod, &pa.coords, &pb.coords), path, k);
    for j in 0..k {
        let axis = moving[(j + path) % k];
        let (dir, steps) = direction(pod, axis, at.coords[axis], pb.coords[axis], flip);
        let len = pod.shape[axis];
        for _ in 0..steps {
            let chip = pod.chip_index(&at.coords);
            out.push(ici_link(pod, base + chip, axis, dir));
            at.coords[axis] = if dir == 0 {
                (at.coords[axis] + 1) % len
            } else {
                (at.coords[axis] + len - 1) % len
            };
        }
    }
}

/// Links as FIFO resources.
struct Net<'p> {
    pod: &'p Pod,
    free: Vec<f64>,
    transfers: u64,
}

impl<'p> Net<'p> {
    fn new(pod: &'p Pod) -> Self {
        Net {
            pod,
            free: vec![0.0; link_count(pod)],
            transfers: 0,
        }
    }

    /// Issues `bytes` over `route` at time `t`; returns when its head and
    /// its tail reach the destination.
    fn send(&mut self, t: f64, route: &[u32], bytes: f64) -> (f64, f64) {
        self.transfers += 1;
        let mut head = t;
        let mut tail = t;
        for &l in route {
            let slot = &mut self.free[l as usize];
            let start = head.max(*slot);
            let dur = bytes / link_bandwidth(self.pod, l);
            *slot = start + dur;
            head = start + link_latency(self.pod, l);
            tail = head + dur;
        }
        (head, tail)
    }
}

/// Simulates `c` on `pod`; `None` when the collective is beyond the
/// simulator's limits (see [`MAX_TRANSFERS`]) or a device is outside the pod.
pub fn simulate(pod: &Pod, c: &Collective) -> Option<SimResult> {
    simulate_cancellable(pod, c, &Cancel::default())
}

/// [`simulate`], giving up (`None`) within a few thousand events once
/// `cancel` is set; the caller tells that apart from a declined simulation by
/// the flag.
pub fn simulate_cancellable(pod: &Pod, c: &Collective, cancel: &Cancel) -> Option<SimResult> {
    match c.kind {
        CollectiveKind::CollectivePermute => {
            let pairs: Vec<(u32, u32, f64)> =
                c.pairs.iter().map(|&(s, t)| (s, t, c.bytes)).collect();
            point_to_point_until(pod, &pairs, cancel)
        }
        CollectiveKind::AllToAll => {
            let total: usize = c.groups.iter().map(|g| g.len() * g.len()).sum();
            if total > MAX_TRANSFERS {
                return None;
            }
            let mut pairs = Vec::with_capacity(total);
            for g in &c.groups {
                let n = g.len();
                let chunk = c.bytes / n as f64;
                for shift in 1..n {
                    for i in 0..n {
                        pairs.push((g[i], g[(i + shift) % n], chunk));
                    }
                }
            }
            point_to_point_until(pod, &pairs, cancel)
        }
        _ => rings(pod, c, cancel),
    }
}

/// A point-to-point transfer on its way: where its head is.
struct Flow {
    at: u32,
    dst: u32,
    /// ICI axes in the order this path takes them.
    order: [u8; 3],
    /// Tie axes (bit per axis) this path takes the negative way round.
    flip: u32,
    bytes: f64,
    /// Crossed the DCN uplink; the destination's downlink is next.
    dcn_in: bool,
    /// When its tail leaves the last link so far.
    tail: f64,
}

/// The next link of a flow and where its head goes.
fn next_link(pod: &Pod, f: &Flow) -> (u32, u32, bool) {
    let (pa, pb) = (pod.place(f.at), pod.place(f.dst));
    if f.dcn_in {
        return (dcn_link(pod, pod.global_chip(f.dst), true), f.dst, false);
    }
    if pa.slice != pb.slice {
        return (dcn_link(pod, pod.global_chip(f.at), false), f.dst, true);
    }
    if pa.chip == pb.chip {
        let dir = usize::from(pa.core > pb.core);
        return (core_link(pod, pod.global_chip(f.at), dir), f.dst, false);
    }
    let axis = f
        .order
        .iter()
        .map(|&a| a as usize)
        .find(|&a| a < pod.axes() && pa.coords[a] != pb.coords[a])
        .unwrap_or(0);
    let (dir, _) = direction(pod, axis, pa.coords[axis], pb.coords[axis], f.flip);
    let len = pod.shape[axis];
    let mut q = pa;
    q.coords[axis] = if dir == 0 {
        (q.coords[axis] + 1) % len
    } else {
        (q.coords[axis] + len - 1) % len
    };
    q.core = pb.core;
    let base = pod.global_chip(f.at) - pa.chip;
    (
        ici_link(pod, base + pa.chip, axis, dir),
        pod.loc_of(&q),
        false,
    )
}

/// Every pair's bytes sent at time 0, split over its paths, simulated hop by
/// hop: each link serves transfers in the order their heads reach it.
pub fn point_to_point(pod: &Pod, pairs: &[(u32, u32, f64)]) -> Option<SimResult> {
    point_to_point_until(pod, pairs, &Cancel::default())
}

/// [`point_to_point`], giving up once `cancel` is set.
fn point_to_point_until(
    pod: &Pod,
    pairs: &[(u32, u32, f64)],
    cancel: &Cancel,
) -> Option<SimResult> {
    if pairs.len() > MAX_TRANSFERS {
        return None;
    }
    let mut free = vec![0.0f64; link_count(pod)];
    let mut flows: Vec<Flow> = Vec::new();
    let mut heap: RadixHeap<u32> = RadixHeap::new();
    for &(s, t, bytes) in pairs {
        let (a, b) = (pod.loc(s)?, pod.loc(t)?);
        if a == b {
            continue;
        }
        let (pa, pb) = (pod.place(a), pod.place(b));
        let moving: Vec<u8> = (0..pod.axes())
            .filter(|&k| pa.coords[k] != pb.coords[k])
            .map(|k| k as u8)
            .collect();
        let k = paths(pod, a, b);
        let tie_axes = ties(pod, &pa.coords, &pb.coords);
        for p in 0..k {
            let mut order = [0u8, 1, 2];
            for (j, slot) in order.iter_mut().enumerate().take(moving.len()) {
                *slot = moving[(j + p) % moving.len()];
            }
            let flip = flips(tie_axes, p, moving.len().max(1));
            heap.push(0.0, flows.len() as u32);
            flows.push(Flow {
                at: a,
                dst: b,
                order,
                flip,
                bytes: bytes / k as f64,
                dcn_in: false,
                tail: 0.0,
            });
            if flows.len() > MAX_TRANSFERS {
                return None;
            }
        }
    }
    let mut end = 0.0f64;
    let mut hops = 0u64;
    let mut events = 0u32;
    while let Some((t, k)) = heap.pop() {
        events = events.wrapping_add(1);
        if events & (CANCEL_EVERY - 1) == 0 && cancel.is_cancelled() {
            return None;
        }
        let f = &mut flows[k as usize];
        if f.at == f.dst && !f.dcn_in {
            end = end.max(f.tail);
            continue;
        }
        let (l, next, dcn_in) = next_link(pod, f);
        let start = t.max(free[l as usize]);
        let dur = f.bytes / link_bandwidth(pod, l);
        free[l as usize] = start + dur;
        let lat = link_latency(pod, l);
        f.tail = start + lat + dur;
        f.at = next;
        f.dcn_in = dcn_in;
        hops += 1;
        heap.push(start + lat, k);
    }
    if cancel.is_cancelled() {
        return None;
    }
    Some(SimResult {
        time_s: end,
        transfers: hops,
    })
}

/// A ring (or a line) of members.
struct Ring {
    members: Vec<u32>,
    closed: bool,
}

/// Rings along one axis (or in group order), for all groups.
#[derive(Default)]
struct RingSet {
    rings: Vec<Ring>,
    /// Member -> (ring, index in ring); `u32::MAX` ring when absent.
    pos: Vec<(u32, u32)>,
    /// Per member and direction, precomputed: the neighbour, shards sent,
    /// and the link when the route is a single link (else `u32::MAX`).
    hops: Vec<[Hop; 2]>,
}

#[derive(Clone, Copy, Default)]
struct Hop {
    to: u32,
    sends: u32,
    link: u32,
}

impl RingSet {
    /// Fills `hops` from `rings` and `pos`.
    fn prepare(&mut self, pod: &Pod, locs: &[u32]) {
        let mut buf = Vec::new();
        self.hops = vec![[Hop::default(); 2]; self.pos.len()];
        for m in 0..self.pos.len() as u32 {
            if self.pos[m as usize].0 == u32::MAX {
                continue;
            }
            for dir in 0..2 {
                let to = self.neighbour(m, dir);
                buf.clear();
                route(pod, locs[m as usize], locs[to as usize], 0, &mut buf);
                self.hops[m as usize][dir] = Hop {
                    to,
                    sends: self.count_sends(m, dir),
                    link: if buf.len() == 1 { buf[0] } else { u32::MAX },
                };
            }
        }
    }

    fn sends(&self, m: u32, dir: usize) -> u32 {
        self.hops[m as usize][dir].sends
    }

    fn count_sends(&self, m: u32, dir: usize) -> u32 {
        let (r, i) = self.pos[m as usize];
        let ring = &self.rings[r as usize];
        let n = ring.members.len() as u32;
        if ring.closed {
            // Bandwidth-optimal bidirectional ring: the n - 1 other shards
            // split over both ways; on an even ring the farthest shard
            // travels half each way (see `halved_step`).
            n / 2
        } else if dir == 0 {
            if i + 1 < n {
                i + 1
            } else {
                0
            }
        } else if i > 0 {
            n - i
        } else {
            0
        }
    }

    fn expected(&self, m: u32) -> u32 {
        let (r, _) = self.pos[m as usize];
        let ring = &self.rings[r as usize];
        let n = ring.members.len() as u32;
        if ring.closed && n.is_multiple_of(2) {
            // The farthest shard arrives as two halves.
            n
        } else {
            n - 1
        }
    }

    /// The step that carries half a shard (the farthest one, on an even
    /// closed ring), or 0 when every step carries a whole shard.
    fn halved_step(&self, m: u32) -> u32 {
        let (r, _) = self.pos[m as usize];
        let ring = &self.rings[r as usize];
        let n = ring.members.len() as u32;
        if ring.closed && n.is_multiple_of(2) {
            n / 2
        } else {
            0
        }
    }

    fn neighbour(&self, m: u32, dir: usize) -> u32 {
        let (r, i) = self.pos[m as usize];
        let ring = &self.rings[r as usize];
        let n = ring.members.len() as u32;
        let j = if dir == 0 {
            (i + 1) % n
        } else {
            (i + n - 1) % n
        };
        ring.members[j as usize]
    }
}

/// One phase of a part: the ring set it runs on and its shard size.
#[derive(Clone, Copy)]
struct Stage {
    set: usize,
    chunk: f64,
}

/// A shard's head reaching `member` (it may forward it at once: rings are
/// pipelined), or, with `step == DONE`, a member's stage completing when the
/// tail of its last shard has arrived.
#[derive(Clone, Copy)]
struct Ev {
    /// part, stage, dir packed; member; step.
    tag: u32,
    member: u32,
    step: u32,
    tail: f64,
}

const DONE: u32 = u32::MAX;

#[derive(Clone, Default)]
struct MemberState {
    stage: u32,
    /// Finished `stage`, waiting for the member's other parts to finish theirs.
    waiting: bool,
    received: u32,
    last_tail: f64,
    early: Vec<(u32, u32, f64)>,
}

struct RingSim<'p> {
    net: Net<'p>,
    locs: Vec<u32>,
    group_of: Vec<u32>,
    /// Per group, per part: its stages.
    programs: Vec<Vec<Vec<Stage>>>,
    sets: Vec<RingSet>,
    state: Vec<Vec<MemberState>>,
    heap: RadixHeap<Ev>,
    buf: Vec<u32>,
    finish: f64,
    cancel: &'p Cancel,
}

fn rings(pod: &Pod, c: &Collective, cancel: &Cancel) -> Option<SimResult> {
    let mut locs = Vec::new();
    let mut group_of = Vec::new();
    let mut geos = Vec::new();
    for (gi, g) in c.groups.iter().enumerate() {
        if g.len() < 2 {
            continue;
        }
        for &d in g {
            locs.push(pod.loc(d)?);
            group_of.push(gi as u32);
        }
        geos.push((gi, geometry(pod, g)?));
    }
    if locs.is_empty() {
        return Some(SimResult {
            time_s: 0.0,
            transfers: 0,
        });
    }
    let axes = pod.axes();
    // Sets 0..axes: ICI axes; axes: core; axes+1: dcn; axes+2: group order.
    let mut sets: Vec<RingSet> = (0..axes + 3).map(|_| RingSet::default()).collect();
    let mut programs: Vec<Vec<Vec<Stage>>> = vec![Vec::new(); c.groups.len()];
    let mut first_member = 0u32;
    let mut starts = vec![0u32; c.groups.len()];
    for (gi, g) in c.groups.iter().enumerate() {
        if g.len() >= 2 {
            starts[gi] = first_member;
            first_member += g.len() as u32;
        }
    }
    let mut keyed: Vec<Vec<(u32, u32, u32, u32)>> = vec![Vec::new(); axes + 2];
    // Per set, per group: whether that group's rings along it are closed.
    let mut closed: Vec<Vec<bool>> = vec![vec![false; c.groups.len()]; axes + 2];
    for (gi, geo) in &geos {
        let base = starts[*gi];
        let n = c.groups[*gi].len() as u32;
        if !geo.regular {
            let members: Vec<u32> = (base..base + n).collect();
            sets[axes + 2].rings.push(Ring {
                members,
                closed: true,
            });
            programs[*gi] = vec![stages_for(c.kind, c.bytes, &[(axes + 2, n)], n)];
            continue;
        }
        for ax in &geo.axes {
            let set = set_index(ax.link, axes);
            for m in base..base + n {
                let p = pod.place(locs[m as usize]);
                let (key, coord) = match ax.link {
                    Link::Ici(a) => {
                        let mut q = p;
                        q.coords[a] = 0;
                        (pod.loc_of(&q), p.coords[a])
                    }
                    Link::Core => (pod.global_chip(locs[m as usize]), p.core),
                    Link::Dcn => {
                        let mut q = p;
                        q.slice = 0;
                        (pod.loc_of(&q), p.slice)
                    }
                };
                keyed[set].push((*gi as u32, key, coord, m));
            }
            closed[set][*gi] = ax.ring;
        }
        programs[*gi] = parts_for(c.kind, c.bytes, geo, axes);
    }
    for (set, mut entries) in keyed.into_iter().enumerate() {
        entries.sort_unstable();
        let ring_closed = |g: u32| closed[set][g as usize];
        let mut k = 0;
        while k < entries.len() {
            let (g, key, _, _) = entries[k];
            let mut j = k;
            while j < entries.len() && entries[j].0 == g && entries[j].1 == key {
                j += 1;
            }
            sets[set].rings.push(Ring {
                members: entries[k..j].iter().map(|e| e.3).collect(),
                closed: ring_closed(g),
            });
            k = j;
        }
    }
    let total = locs.len();
    for set in &mut sets {
        set.pos = vec![(u32::MAX, 0); total];
        for (r, ring) in set.rings.iter().enumerate() {
            for (i, &m) in ring.members.iter().enumerate() {
                set.pos[m as usize] = (r as u32, i as u32);
            }
        }
        set.prepare(pod, &locs);
    }
    let parts = programs.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let mut sim = RingSim {
        net: Net::new(pod),
        state: vec![vec![MemberState::default(); total]; parts],
        locs,
        group_of,
        programs,
        sets,
        heap: RadixHeap::new(),
        buf: Vec::new(),
        finish: 0.0,
        cancel,
    };
    sim.run();
    if cancel.is_cancelled() {
        return None;
    }
    Some(SimResult {
        time_s: sim.finish,
        transfers: sim.net.transfers,
    })
}

fn set_index(link: Link, axes: usize) -> usize {
    match link {
        Link::Ici(a) => a,
        Link::Core => axes,
        Link::Dcn => axes + 1,
    }
}

/// Stages of one part visiting `order` (set, members along it) for `kind`,
/// with `data` bytes in this part and `n` members in the group.
fn stages_for(kind: CollectiveKind, data: f64, order: &[(usize, u32)], n: u32) -> Vec<Stage> {
    let n = f64::from(n.max(1));
    let gather = |order: &[(usize, u32)]| {
        let mut shard = data / n;
        order
            .iter()
            .map(|&(set, k)| {
                let s = Stage { set, chunk: shard };
                shard *= f64::from(k);
                s
            })
            .collect::<Vec<_>>()
    };
    let scatter = |order: &[(usize, u32)]| {
        let mut rest = data;
        order
            .iter()
            .map(|&(set, k)| {
                rest /= f64::from(k.max(1));
                Stage { set, chunk: rest }
            })
            .collect::<Vec<_>>()
    };
    match kind {
        CollectiveKind::AllGather => gather(order),
        CollectiveKind::ReduceScatter => scatter(order),
        _ => {
            let mut s = scatter(order);
            let back: Vec<(usize, u32)> = order.iter().rev().copied().collect();
            s.extend(gather(&back));
            s
        }
    }
}

/// One part per local axis, each visiting the local axes in a rotated order;
/// DCN last when scattering and first when gathering.
fn parts_for(kind: CollectiveKind, bytes: f64, geo: &Geometry, axes: usize) -> Vec<Vec<Stage>> {
    let local: Vec<(usize, u32)> = geo
        .local_axes()
        .map(|a| (set_index(a.link, axes), a.n))
        .collect();
    let dcn = geo.dcn().map(|a| (set_index(a.link, axes), a.n));
    let parts = local.len().max(1);
    let data = bytes / parts as f64;
    (0..parts)
        .map(|p| {
            let mut order: Vec<(usize, u32)> = (0..local.len())
                .map(|j| local[(j + p) % local.len()])
                .collect();
            if let Some(d) = dcn {
                if kind == CollectiveKind::AllGather {
                    order.insert(0, d);
                } else {
                    order.push(d);
                }
            }
            stages_for(kind, data, &order, geo.size)
        })
        .collect()
}

impl RingSim<'_> {
    fn run(&mut self) {
        let total = self.locs.len() as u32;
        for p in 0..self.state.len() {
            for m in 0..total {
                if p < self.program(m).len() {
                    self.enter(p, m, 0.0);
                }
            }
        }
        let mut events = 0u32;
        while let Some((t, ev)) = self.heap.pop() {
            events = events.wrapping_add(1);
            if events & (CANCEL_EVERY - 1) == 0 && self.cancel.is_cancelled() {
                return;
            }
            let (p, stage, dir) = unpack(ev.tag);
            let st = &mut self.state[p][ev.member as usize];
            if ev.step == DONE {
                st.waiting = true;
                self.next_stage(ev.member, t);
                continue;
            }
            let tail = ev.tail;
            if st.stage < stage {
                st.early.push((dir as u32, ev.step, tail));
                continue;
            }
            self.arrive(p, ev.member, dir, ev.step, t, tail);
        }
    }

    /// A member moves all its parts to their next stage together, once every
    /// part has finished the current one: parts visit the axes in rotated
    /// orders, and this keeps two parts off the same axis at one member.
    fn next_stage(&mut self, m: u32, t: f64) {
        let parts = self.program(m).len();
        let ready = (0..parts).all(|q| {
            let s = &self.state[q][m as usize];
            s.waiting || s.stage as usize >= self.program(m)[q].len()
        });
        if !ready {
            return;
        }
        for q in 0..parts {
            let s = &mut self.state[q][m as usize];
            if s.waiting {
                s.waiting = false;
                s.stage += 1;
                s.received = 0;
                self.enter(q, m, t);
            }
        }
    }

    fn program(&self, m: u32) -> &Vec<Vec<Stage>> {
        &self.programs[self.group_of[m as usize] as usize]
    }

    /// Member `m` starts its current stage of part `p` at `t`.
    fn enter(&mut self, p: usize, m: u32, t: f64) {
        loop {
            let stage = self.state[p][m as usize].stage as usize;
            let Some(&st) = self.program(m)[p].get(stage) else {
                self.finish = self.finish.max(t);
                return;
            };
            let set = &self.sets[st.set];
            if set.pos[m as usize].0 == u32::MAX || set.expected(m) == 0 {
                self.state[p][m as usize].stage += 1;
                continue;
            }
            for dir in 0..2 {
                if self.sets[st.set].sends(m, dir) >= 1 {
                    self.send(p, stage, m, dir, 1, t);
                }
            }
            let early = std::mem::take(&mut self.state[p][m as usize].early);
            for (dir, step, tail) in early {
                self.arrive(p, m, dir as usize, step, t, tail);
            }
            return;
        }
    }

    /// A shard's head reached `m` at `t` (its tail arrives at `tail`).
    fn arrive(&mut self, p: usize, m: u32, dir: usize, step: u32, t: f64, tail: f64) {
        let stage = self.state[p][m as usize].stage as usize;
        let Some(&st) = self.program(m)[p].get(stage) else {
            return;
        };
        if step < self.sets[st.set].sends(m, dir) {
            self.send(p, stage, m, dir, step + 1, t);
        }
        let s = &mut self.state[p][m as usize];
        s.received += 1;
        s.last_tail = s.last_tail.max(tail);
        if s.received == self.sets[st.set].expected(m) {
            let done = s.last_tail.max(t);
            self.push(done, pack(p, stage, 0), m, DONE, done);
        }
    }

    fn push(&mut self, time: f64, tag: u32, member: u32, step: u32, tail: f64) {
        self.heap.push(
            time,
            Ev {
                tag,
                member,
                step,
                tail,
            },
        );
    }

    fn send(&mut self, p: usize, stage: usize, m: u32, dir: usize, step: u32, t: f64) {
        let st = self.program(m)[p][stage];
        let hop = self.sets[st.set].hops[m as usize][dir];
        let bytes = if step == self.sets[st.set].halved_step(m) {
            st.chunk / 2.0
        } else {
            st.chunk
        };
        let (head, tail) = if hop.link != u32::MAX {
            self.net.send(t, &[hop.link], bytes)
        } else {
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            let (a, b) = (self.locs[m as usize], self.locs[hop.to as usize]);
            route(self.net.pod, a, b, 0, &mut buf);
            let r = self.net.send(t, &buf, bytes);
            self.buf = buf;
            r
        };
        let to = hop.to;
        self.push(head, pack(p, stage, dir), to, step, tail);
    }
}

fn pack(p: usize, stage: usize, dir: usize) -> u32 {
    ((p as u32) << 16) | ((stage as u32) << 1) | dir as u32
}

fn unpack(tag: u32) -> (usize, u32, usize) {
    (
        (tag >> 16) as usize,
        (tag & 0xffff) >> 1,
        (tag & 1) as usize,
    )
}
