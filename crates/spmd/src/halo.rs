//! Halo plans: which rows each device of a dim tiled in `n` shards needs from
//! its neighbours to compute a window over the dim (a static slice or an
//! edge pad, which XLA's partitioner treats as windows of one row), as XLA's
//! `ReshardAsWindowedInput` and `ExchangeHalo` work it out, trimming the
//! shards that hold no useful rows when the windows are fewer than the
//! shards. Pure arithmetic: `build` emits the plan's collective-permutes,
//! concatenate and slices.

/// One dim's window: a dim of `base` rows tiled in `parts` shards of `shard`
/// rows (the last padded when uneven), read by windows of one row every
/// `stride` rows over the dim padded by `low` and `high` (negative: cut).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimWindow {
    pub base: i64,
    pub parts: i64,
    pub shard: i64,
    pub stride: i64,
    pub low: i64,
    pub high: i64,
}

/// A block of rows a device puts in its halo-extended value, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Rows of zeros (no device holds them: past either end).
    Zeros(i64),
    /// The device's own rows `start..limit`.
    Own { start: i64, limit: i64 },
    /// Rows `start..limit` of the shard `distance` tiles before the device's
    /// (devices with no such shard receive zeros).
    FromLeft {
        distance: i64,
        start: i64,
        limit: i64,
    },
    /// Rows `start..limit` of the shard `distance` tiles after the device's.
    FromRight {
        distance: i64,
        start: i64,
        limit: i64,
    },
}

impl Piece {
    pub fn rows(&self) -> i64 {
        match *self {
            Piece::Zeros(n) => n,
            Piece::Own { start, limit }
            | Piece::FromLeft { start, limit, .. }
            | Piece::FromRight { start, limit, .. } => limit - start,
        }
    }
}

/// How a device gets the input rows of its windows along one dim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaloPlan {
    /// The halo-extended value, in order.
    pub pieces: Vec<Piece>,
    /// Rows of padding added before and after the pieces.
    pub pad: (i64, i64),
    /// Per shard index: where its windows' input starts in the padded value.
    pub offsets: Vec<i64>,
    /// Rows of one device's windows' input (`stride * (windows - 1) + 1`).
    pub rows: i64,
    /// Per shard index: where its windows' input starts in the padded dim
    /// (for masking the rows of padding).
    pub window_starts: Vec<i64>,
    /// Rows of padding before the data in the padded dim (`low`).
    pub low: i64,
    /// Rows of the padded dim the windows span (all shards).
    pub padded: i64,
}

/// How a dim's windows get their rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// Halos from the neighbours on either side (`ExchangeHalo`).
    Halo(HaloPlan),
    /// Halos far wider than the result's shard: each device is sent only
    /// the rows its windows read (`ExchangeHaloCompact`).
    Compact(CompactPlan),
}

impl Exchange {
    /// Rows of a device's windows' input.
    pub fn rows(&self) -> i64 {
        match self {
            Exchange::Halo(p) => p.rows,
            Exchange::Compact(c) => c.rows,
        }
    }
}

/// Where a device takes one block of its windows' rows from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// The result of send `k`.
    Sent(usize),
    /// Its own rows from `start`.
    Own(i64),
    /// Padding (rows past either end of the dim).
    Padding,
}

/// One collective-permute of a compact exchange: rows `start..limit` of
/// the source shards, sent along `pairs` (source, target shard indices).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Send {
    pub start: i64,
    pub limit: i64,
    pub pairs: Vec<(i64, i64)>,
}

/// A compact exchange: each device joins blocks of `sizes[b]` rows, block
/// `b` taken as `takes[b][shard]` says (shorter ones padded, at the front
/// in the first block, else at the back), pads the join to `padded` rows
/// and keeps `rows` rows from `offsets[shard]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactPlan {
    pub sends: Vec<Send>,
    pub sizes: Vec<i64>,
    pub takes: Vec<Vec<Take>>,
    pub padded: i64,
    pub offsets: Vec<i64>,
    pub rows: i64,
    /// Per shard: the rows (of the `rows` kept) that hold data, not padding.
    pub valid: Vec<(i64, i64)>,
}

/// Why a window's rows are not exchanged as halos.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoHalo {
    /// The halos are too wide: XLA gathers the dim whole.
    TooWide,
    /// Fewer windows than shards: XLA trims the shards first.
    FewerWindowsThanShards,
    /// A degenerate window (no rows).
    Empty,
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1).div_euclid(b)
}

fn max_over(range: std::ops::Range<i64>, f: impl Fn(i64) -> i64) -> i64 {
    range.map(f).max().unwrap_or(i64::MIN)
}

/// Shards left out of a dim's exchange when it has fewer windows than
/// shards (XLA's trimmed target sharding in `ReshardAsWindowedInput`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trim {
    /// The tile index of each shard that takes part, in order: the
    /// exchange's shard `k` is tile `shards[k]`.
    pub shards: Vec<i64>,
    /// The rows of its own shard each device puts into the exchange.
    pub own: (i64, i64),
    /// Whether rows past the dim's end are set to the fill first (the
    /// exchanged shards run past an uneven end into a pad's high edge).
    pub premask: bool,
    /// Rows of the dim the exchange sees: its shards' kept rows, joined.
    pub base: i64,
}

/// How a dim's windows get their rows, shards trimmed or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    pub exchange: Exchange,
    pub trim: Option<Trim>,
}

/// The plan for `w`, trimming the shards that hold no useful input when
/// the windows are fewer than the shards, as XLA does: shards past the
/// last useful one, and a run in the middle between the shards with
/// windows and the one whose rows they read (`x[:, -1]` of a tiled
/// sequence: the last device sends its row to the first).
pub fn plan_windows(w: &DimWindow) -> Result<WindowPlan, NoHalo> {
    match plan(w) {
        Err(NoHalo::FewerWindowsThanShards) => trimmed(w),
        other => other.map(|exchange| WindowPlan {
            exchange,
            trim: None,
        }),
    }
}

fn trimmed(w: &DimWindow) -> Result<WindowPlan, NoHalo> {
    let (base, n, s, stride, low, high) = (w.base, w.parts, w.shard, w.stride, w.low, w.high);
    let full = base + low + high;
    let count = (full - 1) / stride + 1;
    let mut kept = n;
    let mut size = s;
    let mut own = (0, s);
    let mut premask = false;
    let useful = ceil_div(base + high, s);
    if useful < n {
        kept = useful.max(count);
        if kept == 1 {
            return Ok(WindowPlan {
                exchange: Exchange::Halo(local_windows(w, count)),
                trim: Some(Trim {
                    shards: vec![0],
                    own,
                    premask,
                    base: s,
                }),
            });
        }
        if s * kept > base && high > 0 {
            premask = true;
        } else if high < 0 && full - low < s {
            size = full - low;
            own.1 = size;
        }
    }
    if size < 1 {
        // The windows read padding only.
        return Err(NoHalo::Empty);
    }
    let mut left = low;
    let mut middle = 0;
    let empty = (-left) / size - count;
    if count < kept && empty > 0 {
        middle = empty;
        kept -= empty;
        left += empty * size;
        if -left > size * (kept - 1) {
            let skip = -left - size * (kept - 1);
            size -= skip;
            left += skip * kept;
            own.0 = skip;
            if full < size {
                let skip = size - full;
                own.1 -= skip;
                left += skip * (kept - 1);
                size = full;
            }
        }
    }
    if kept < 2 || size < 1 {
        return Err(NoHalo::Empty);
    }
    let shards = (0..kept)
        .map(|k| if k < count { k } else { k + middle })
        .collect();
    let exchanged = DimWindow {
        base: size * kept,
        parts: kept,
        shard: size,
        stride,
        low: left,
        high: 0,
    };
    Ok(WindowPlan {
        exchange: exchange(&exchanged, ceil_div(count, n))?,
        trim: Some(Trim {
            shards,
            own,
            premask,
            base: size * kept,
        }),
    })
}

/// All of `w`'s `count` windows read rows of its first shard: each
/// device reads them from its own (only the first's are used).
fn local_windows(w: &DimWindow, count: i64) -> HaloPlan {
    let rows = w.stride * (count - 1) + 1;
    let pad_low = w.low.max(0);
    let offset = (-w.low).max(0);
    HaloPlan {
        pieces: vec![Piece::Own {
            start: 0,
            limit: w.shard,
        }],
        pad: (pad_low, (offset + rows - pad_low - w.shard).max(0)),
        offsets: vec![offset],
        rows,
        window_starts: vec![0],
        low: w.low,
        padded: rows,
    }
}

/// The plan for `w`, or why XLA does not exchange halos for it.
pub fn plan(w: &DimWindow) -> Result<Exchange, NoHalo> {
    let DimWindow {
        base,
        parts: n,
        shard: s,
        stride,
        low,
        high,
    } = *w;
    if n < 2 || s < 1 || stride < 1 {
        return Err(NoHalo::Empty);
    }
    let full = base + low + high;
    if full < 1 {
        return Err(NoHalo::Empty);
    }
    let count = (full - 1) / stride + 1;
    if count < n {
        return Err(NoHalo::FewerWindowsThanShards);
    }
    exchange(w, ceil_div(count, n))
}

/// The exchange that gives each of `w`'s shards the input of its
/// `windows` windows.
fn exchange(w: &DimWindow, windows: i64) -> Result<Exchange, NoHalo> {
    let DimWindow {
        parts: n,
        shard: s,
        stride,
        low,
        ..
    } = *w;
    let rows = stride * (windows - 1) + 1;
    let start = |i: i64| stride * windows * i;
    let limit = |i: i64| start(i) + rows;
    // Rows a device needs beyond its own, before and after them.
    let left = |i: i64| s * i + low - start(i);
    let right = |i: i64| limit(i) - (s * i + s + low);
    let widest = max_over(0..n, |i| left(i).max(right(i)));
    let span = max_over(0..n, |i| left(i) + right(i));
    if low == left(0) && s + span == rows && widest > 2 * rows {
        if 2 * rows >= n * s {
            return Err(NoHalo::TooWide);
        }
        return Ok(Exchange::Compact(compact(w, rows, &left, &right)));
    }
    let max_left = max_over(1..n, left);
    let max_right = max_over(0..n - 1, right);
    if max_left + max_right + s >= s * n && (max_left > s || max_right > s) {
        return Err(NoHalo::TooWide);
    }
    let lb = -max_over(0..n, left);
    let rb = s + max_over(0..n, right);
    if lb >= rb {
        return Err(NoHalo::Empty);
    }
    let mut front = 0;
    let mut lefts = Vec::new();
    for k in (0..ceil_div(max_left, s)).rev() {
        if (-k - 1) * s >= rb {
            break;
        }
        let skip = (-k * s - rb).max(0);
        let from = s - (max_left - s * k).min(s);
        if s - skip <= from {
            continue;
        }
        if k + 1 >= n {
            front += s - skip - from;
        } else {
            lefts.push(Piece::FromLeft {
                distance: k + 1,
                start: from,
                limit: s - skip,
            });
        }
    }
    let mut pieces = Vec::new();
    if front > 0 {
        pieces.push(Piece::Zeros(front));
    }
    pieces.extend(lefts);
    if lb < s && rb > 0 {
        pieces.push(Piece::Own {
            start: lb.max(0),
            limit: s.min(rb),
        });
    }
    let mut back = 0;
    for k in (lb - s).max(0).min(max_right.max(0)) / s..ceil_div(max_right, s) {
        let skip = (lb - (k + 1) * s).max(0);
        let to = (max_right - s * k).min(s);
        if to <= skip {
            continue;
        }
        if k + 1 >= n {
            back += to - skip;
        } else {
            pieces.push(Piece::FromRight {
                distance: k + 1,
                start: skip,
                limit: to,
            });
        }
    }
    if back > 0 {
        pieces.push(Piece::Zeros(back));
    }
    let joined: i64 = pieces.iter().map(Piece::rows).sum();
    let first = max_left.max(low);
    let offsets: Vec<i64> = (0..n).map(|i| first - left(i)).collect();
    let pad_low = (first - max_left.max(0)).max(0);
    let last = offsets.iter().copied().max().unwrap_or(0);
    let pad_high = (last + rows - joined - pad_low).max(0);
    Ok(Exchange::Halo(HaloPlan {
        pieces,
        pad: (pad_low, pad_high),
        offsets,
        rows,
        window_starts: (0..n).map(start).collect(),
        low,
        padded: limit(n - 1),
    }))
}

/// A block of rows one shard's windows read: from shard `from` (rows
/// `start..limit` of it) or padding (`from` = None), at `at` rows into
/// the windows' input.
#[derive(Clone, Copy, Debug)]
struct Block {
    from: Option<i64>,
    start: i64,
    limit: i64,
    at: i64,
    send: Option<usize>,
}

/// The compact exchange of `ExchangeHaloCompact`: every shard's windows'
/// rows cut at shard boundaries into blocks; blocks from other shards
/// grouped into as few collective-permutes as keep each target once per
/// permute.
fn compact(
    w: &DimWindow,
    rows: i64,
    left: &dyn Fn(i64) -> i64,
    right: &dyn Fn(i64) -> i64,
) -> CompactPlan {
    let (n, s) = (w.parts, w.shard);
    let mut blocks: Vec<Vec<Block>> = (0..n)
        .map(|i| {
            let (start, limit) = (i * s - left(i), (i + 1) * s + right(i));
            let mut out = Vec::new();
            let mut next = start;
            while next < limit {
                let first = next.rem_euclid(s);
                let mut size = limit - next;
                let from = if next < 0 || next >= w.base {
                    if next < 0 {
                        size = size.min(-next);
                    }
                    None
                } else {
                    size = size.min(s - first);
                    Some(next / s)
                };
                out.push(Block {
                    from,
                    start: first,
                    limit: first + size,
                    at: next - start,
                    send: None,
                });
                next += size;
            }
            out
        })
        .collect();
    // Unless every shard has padding at a position, padding is cut to at
    // most a shard's rows there.
    let mut cut: Vec<Vec<Block>> = vec![Vec::new(); n as usize];
    let mut next = vec![0usize; n as usize];
    let mut by_source: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n as usize];
    loop {
        let current: Vec<Option<Block>> = (0..n as usize)
            .map(|i| blocks[i].get(next[i]).copied())
            .collect();
        if current.iter().all(Option::is_none) {
            break;
        }
        let all_padding = current.iter().flatten().all(|b| b.from.is_none());
        for i in 0..n as usize {
            let Some(b) = current[i] else { continue };
            let mut kept = b;
            if !all_padding && b.from.is_none() && b.limit > s {
                kept.limit = s;
                let rest = &mut blocks[i][next[i]];
                rest.start = 0;
                rest.limit -= s;
            } else {
                next[i] += 1;
            }
            cut[i].push(kept);
            if let Some(src) = b.from.filter(|&f| f != i as i64) {
                by_source[src as usize].push((i, cut[i].len() - 1));
            }
        }
    }
    let mut blocks = cut;
    for list in &mut by_source {
        list.sort_by_key(|&(i, k)| blocks[i][k].at);
    }
    let mut sends: Vec<Send> = Vec::new();
    let mut taken = vec![0usize; n as usize];
    loop {
        let mut pairs = Vec::new();
        let mut seen = vec![false; n as usize];
        let (mut start, mut limit) = (s, 0);
        for src in 0..n as usize {
            let Some(&(i, k)) = by_source[src].get(taken[src]) else {
                continue;
            };
            let b = blocks[i][k];
            let joins_far_ends = (start > b.limit && limit == s && b.start == 0)
                || (limit < b.start && start == 0 && b.limit == s);
            if !pairs.is_empty() && (seen[i] || joins_far_ends) {
                continue;
            }
            blocks[i][k].send = Some(sends.len());
            seen[i] = true;
            pairs.push((src as i64, i as i64));
            start = start.min(b.start);
            limit = limit.max(b.limit);
            taken[src] += 1;
        }
        if pairs.is_empty() {
            break;
        }
        sends.push(Send {
            start,
            limit,
            pairs,
        });
    }
    let mut sizes = Vec::new();
    let mut takes = Vec::new();
    let mut own_first = s;
    for b in 0.. {
        let row: Vec<Option<Block>> = blocks.iter().map(|l| l.get(b).copied()).collect();
        if row.iter().all(Option::is_none) {
            break;
        }
        let (mut size, mut own_start, mut own_limit) = (0, s, 0);
        for blk in row.iter().flatten() {
            match (blk.send, blk.from) {
                (Some(k), _) => size = size.max(sends[k].limit - sends[k].start),
                (None, Some(_)) => {
                    own_start = own_start.min(blk.start);
                    own_limit = own_limit.max(blk.limit);
                    size = size.max(own_limit - own_start);
                }
                (None, None) => size = size.max(blk.limit - blk.start),
            }
        }
        let own_start = (own_start - (size - (own_limit - own_start))).max(0);
        if b == 0 {
            own_first = own_start;
        }
        takes.push(
            row.iter()
                .map(|blk| match blk.map(|x| (x.send, x.from)) {
                    Some((Some(k), _)) => Take::Sent(k),
                    Some((None, Some(_))) => Take::Own(own_start),
                    _ => Take::Padding,
                })
                .collect(),
        );
        sizes.push(size);
    }
    let first = sizes.first().copied().unwrap_or(0);
    let mut padded: i64 = sizes.iter().sum();
    let mut offsets = vec![0; n as usize];
    let mut valid = vec![(0, 0); n as usize];
    for i in 0..n as usize {
        let Some(b) = blocks[i].first().copied() else {
            continue;
        };
        let starts = blocks[i]
            .iter()
            .take_while(|x| x.from.is_none())
            .map(|x| x.limit - x.start)
            .sum();
        let ii = i as i64;
        let mut limit = left(ii) + right(ii) + s;
        let high = right(ii) + s * (ii + 1) - w.base;
        if high > 0 {
            limit -= high;
        }
        valid[i] = (starts, limit);
        offsets[i] = match (b.send, b.from) {
            (Some(k), _) => b.start - sends[k].start + first - (sends[k].limit - sends[k].start),
            (None, Some(_)) => b.start - own_first,
            (None, None) => first - (b.limit - b.start),
        };
        padded = padded.max(offsets[i] + rows);
    }
    CompactPlan {
        sends,
        sizes,
        takes,
        padded,
        offsets,
        rows,
        valid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A row of a device's value: `Some(r)`, row `r` of the dim (`-1`: the
    /// padding of an uneven last shard), or `None`, zeros or padding.
    type Row = Option<i64>;

    fn shard(w: &DimWindow, i: i64) -> Vec<Row> {
        (i * w.shard..(i + 1) * w.shard)
            .map(|r| Some(if r < w.base { r } else { -1 }))
            .collect()
    }

    fn rows_of(v: &[Row], start: i64, limit: i64) -> Vec<Row> {
        v[start as usize..limit as usize].to_vec()
    }

    /// What the exchange's shard `i` holds after a neighbour exchange, as
    /// `build` emits it, from the rows `data` each shard puts in.
    fn run_halo(data: &[Vec<Row>], p: &HaloPlan, i: i64) -> Vec<Row> {
        let mut joined = Vec::new();
        for piece in &p.pieces {
            match *piece {
                Piece::Zeros(k) => joined.extend(vec![None; k as usize]),
                Piece::Own { start, limit } => {
                    joined.extend(rows_of(&data[i as usize], start, limit))
                }
                Piece::FromLeft {
                    distance,
                    start,
                    limit,
                }
                | Piece::FromRight {
                    distance,
                    start,
                    limit,
                } => {
                    let from = if matches!(piece, Piece::FromLeft { .. }) {
                        i - distance
                    } else {
                        i + distance
                    };
                    if (0..data.len() as i64).contains(&from) {
                        joined.extend(rows_of(&data[from as usize], start, limit));
                    } else {
                        joined.extend(vec![None; (limit - start) as usize]);
                    }
                }
            }
        }
        let mut padded = vec![None; p.pad.0 as usize];
        padded.extend(joined);
        padded.extend(vec![None; p.pad.1 as usize]);
        let o = p.offsets[i as usize];
        rows_of(&padded, o, o + p.rows)
    }

    /// What the exchange's shard `i` holds after a compact exchange, as
    /// `build` emits it.
    fn run_compact(data: &[Vec<Row>], c: &CompactPlan, i: i64) -> Vec<Row> {
        let received: Vec<Vec<Row>> = c
            .sends
            .iter()
            .map(|send| match send.pairs.iter().find(|&&(_, to)| to == i) {
                Some(&(from, _)) => rows_of(&data[from as usize], send.start, send.limit),
                None => vec![None; (send.limit - send.start) as usize],
            })
            .collect();
        let mut joined = Vec::new();
        for (b, (&size, takes)) in c.sizes.iter().zip(&c.takes).enumerate() {
            let mut piece = match takes[i as usize] {
                Take::Sent(k) => received[k].clone(),
                Take::Own(start) => {
                    let own = &data[i as usize];
                    rows_of(own, start, (start + size).min(own.len() as i64))
                }
                Take::Padding => vec![None; size as usize],
            };
            let short = vec![None; (size - piece.len() as i64) as usize];
            if b == 0 {
                piece.splice(0..0, short);
            } else {
                piece.extend(short);
            }
            joined.extend(piece);
        }
        joined.resize(c.padded.max(joined.len() as i64) as usize, None);
        let o = c.offsets[i as usize];
        rows_of(&joined, o, o + c.rows)
    }

    fn window(base: i64, parts: i64, stride: i64, low: i64, high: i64) -> DimWindow {
        DimWindow {
            base,
            parts,
            shard: (base + parts - 1) / parts,
            stride,
            low,
            high,
        }
    }

    /// What device `tile` holds after `wp`'s exchange: `None` when its
    /// shard was trimmed out of it.
    fn run(w: &DimWindow, wp: &WindowPlan, tile: i64) -> Option<Vec<Row>> {
        let (shards, own, premask) = match &wp.trim {
            Some(t) => (t.shards.clone(), t.own, t.premask),
            None => ((0..w.parts).collect(), (0, w.shard), false),
        };
        let k = shards.iter().position(|&s| s == tile)? as i64;
        let data: Vec<Vec<Row>> = shards
            .iter()
            .map(|&s| {
                let rows = rows_of(&shard(w, s), own.0, own.1);
                let masked = |r: Row| if premask && r == Some(-1) { None } else { r };
                rows.into_iter().map(masked).collect()
            })
            .collect();
        Some(match &wp.exchange {
            Exchange::Halo(p) => run_halo(&data, p, k),
            Exchange::Compact(c) => run_compact(&data, c, k),
        })
    }

    proptest! {
        /// Every row a device's windows read is the row of the dim they
        /// read, wherever the plan fetched it from: rows inside the data
        /// exactly, rows outside it zeros where the dim is even (where it
        /// is not, the partitioner masks them). With fewer windows than
        /// shards, the devices with windows get theirs from the shards
        /// left in the exchange.
        #[test]
        fn every_window_reads_the_rows_it_should(
            parts in 2i64..=8,
            extra in 0i64..=40,
            stride in 1i64..=3,
            low in -40i64..=20,
            high in -40i64..=20,
        ) {
            let base = parts + extra;
            let w = window(base, parts, stride, low, high);
            let Ok(wp) = plan_windows(&w) else { return Ok(()) };
            let count = (base + low + high - 1) / stride + 1;
            let windows = (count + parts - 1) / parts;
            for i in 0..parts {
                let Some(got) = run(&w, &wp, i) else {
                    prop_assert!(windows * i >= count, "device {} has windows: {:?}", i, wp);
                    continue;
                };
                prop_assert_eq!(got.len() as i64, wp.exchange.rows());
                for (r, &row) in got.iter().enumerate() {
                    let r = r as i64;
                    // Only the rows a window starts on are read.
                    if r % stride != 0 || windows * i + r / stride >= count {
                        continue;
                    }
                    let data = stride * windows * i + r - low;
                    if (0..base).contains(&data) {
                        prop_assert_eq!(row, Some(data), "device {} row {}: {:?}", i, r, wp);
                    } else if base % parts == 0 && matches!(wp.exchange, Exchange::Halo(_)) {
                        prop_assert_eq!(row, None, "device {} row {}", i, r);
                    }
                }
            }
        }
    }

    /// XLA's own partition of `pad(x, 2_6)`, x: 24 rows over 8 devices
    /// (testdata/spmd_cases/concat_pad_slice/xla_partitioned.hlo): one row
    /// from the left, the next shard whole and two rows of the one after,
    /// padded 1_1 to 11 rows, each device's 4 rows from row `i`.
    #[test]
    fn a_pad_that_widens_shards_takes_rows_from_up_to_two_shards_away() {
        let p = plan(&DimWindow {
            base: 24,
            parts: 8,
            shard: 3,
            stride: 1,
            low: 2,
            high: 6,
        })
        .map(halo)
        .unwrap();
        assert_eq!(
            p.pieces,
            vec![
                Piece::FromLeft {
                    distance: 1,
                    start: 2,
                    limit: 3
                },
                Piece::Own { start: 0, limit: 3 },
                Piece::FromRight {
                    distance: 1,
                    start: 0,
                    limit: 3
                },
                Piece::FromRight {
                    distance: 2,
                    start: 0,
                    limit: 2
                },
            ]
        );
        assert_eq!(p.pad, (1, 1));
        assert_eq!(p.offsets, (0..8).collect::<Vec<_>>());
        assert_eq!((p.rows, p.padded), (4, 32));
    }

    /// `x[1:]` over a dim of 16 rows in 8 shards: each device drops its first
    /// row and takes its right neighbour's first.
    #[test]
    fn a_shift_by_one_row_takes_one_row_from_the_right() {
        let p = plan(&DimWindow {
            base: 16,
            parts: 8,
            shard: 2,
            stride: 1,
            low: -1,
            high: 0,
        })
        .map(halo)
        .unwrap();
        assert_eq!(
            p.pieces,
            vec![
                Piece::Own { start: 1, limit: 2 },
                Piece::FromRight {
                    distance: 1,
                    start: 0,
                    limit: 1
                },
            ]
        );
        assert_eq!((p.pad, p.rows), ((0, 0), 2));
        assert!(p.offsets.iter().all(|&o| o == 0));
    }

    /// `x[::2]` with two rows a shard: every device keeps its first row.
    fn halo(e: Exchange) -> HaloPlan {
        match e {
            Exchange::Halo(p) => p,
            Exchange::Compact(c) => panic!("compact: {c:?}"),
        }
    }

    #[test]
    fn a_stride_matching_the_shard_stays_local() {
        let p = plan(&DimWindow {
            base: 16,
            parts: 8,
            shard: 2,
            stride: 2,
            low: 0,
            high: 0,
        })
        .map(halo)
        .unwrap();
        assert_eq!(p.pieces, vec![Piece::Own { start: 0, limit: 1 }]);
        assert_eq!(p.rows, 1);
    }

    /// `x[3:11]` of 16 rows in 8 shards: halos of up to 4 rows for 1-row
    /// shards, which XLA exchanges compactly.
    #[test]
    fn a_slice_far_narrower_than_its_operand_is_exchanged_compactly() {
        let w = DimWindow {
            base: 16,
            parts: 8,
            shard: 2,
            stride: 1,
            low: -3,
            high: -5,
        };
        let Ok(Exchange::Compact(c)) = plan(&w) else {
            panic!("not compact: {:?}", plan(&w));
        };
        // XLA's own: the whole shard from 1->0, 2->1, 3->4, 4->5, 5->7, then
        // row 1 from 4->6; each device's row at offset 1 or 0.
        assert_eq!(
            c.sends,
            vec![
                Send {
                    start: 0,
                    limit: 2,
                    pairs: vec![(1, 0), (2, 1), (3, 4), (4, 5), (5, 7)]
                },
                Send {
                    start: 1,
                    limit: 2,
                    pairs: vec![(4, 6)]
                },
            ]
        );
        assert_eq!(c.offsets, vec![1, 0, 1, 0, 1, 0, 1, 0]);
        assert_eq!((c.rows, c.sizes.clone()), (1, vec![2]));
        let few = DimWindow { high: -10, ..w };
        assert_eq!(plan(&few), Err(NoHalo::FewerWindowsThanShards));
    }

    /// `x[15:16]` of 16 rows in 8 shards (`x[:, -1]`, case
    /// last_token_seq_tiled): XLA trims the six shards between the first
    /// (the one window) and the last (its row), each device keeps its
    /// second row, and the last device sends it to the first.
    #[test]
    fn one_window_far_from_its_row_trims_the_shards_between() {
        let wp = plan_windows(&DimWindow {
            base: 16,
            parts: 8,
            shard: 2,
            stride: 1,
            low: -15,
            high: 0,
        })
        .unwrap();
        let trim = wp.trim.clone().unwrap();
        assert_eq!(
            (trim.shards, trim.own, trim.premask),
            (vec![0, 7], (1, 2), false)
        );
        let p = halo(wp.exchange);
        assert_eq!(
            p.pieces,
            vec![Piece::FromRight {
                distance: 1,
                start: 0,
                limit: 1
            }]
        );
        assert_eq!((p.rows, p.offsets), (1, vec![0, 0]));
    }
}
