//! Shardings of entry parameters and results: which block of a global array each
//! device holds, splitting global arrays into shards and assembling them back.
//!
//! Uneven shards follow XLA: every shard has `ceil(global / tiles)` elements along
//! a tiled dim and the last ones are padded (with zeros here; XLA leaves the padding
//! unspecified and never reads it).

use crate::value::same_dims;
use crate::value::{strides, Array, Value};
use crate::InterpError;
use tpusim_hlo::attr::{DeviceList, ShardingKind, SingleSharding, TileAssignment};
use tpusim_hlo::{AttrValue, Module, Opcode};

/// Custom-call targets that only appear in unpartitioned (pre-SPMD) modules.
fn is_unpartitioned_marker(target: &str) -> bool {
    matches!(
        target,
        "Sharding" | "SPMDFullToShardShape" | "SPMDShardToFullShape"
    ) || target.starts_with("xla.sdy.")
}

/// Targets that move between global and per-shard shapes around manual
/// (shard_map) regions.
fn is_manual_marker(target: &str) -> bool {
    matches!(target, "SPMDFullToShardShape" | "SPMDShardToFullShape")
}

fn custom_call_targets(m: &Module) -> impl Iterator<Item = &str> {
    m.instrs
        .iter()
        .filter(|i| i.opcode == Opcode::CustomCall)
        .filter_map(|i| i.attr_ident("custom_call_target"))
}

/// Whether a multi-device module has been partitioned by XLA's SPMD partitioner
/// (per-device shapes) rather than being the global program with annotations.
pub fn is_partitioned(m: &Module) -> bool {
    let header_mesh = match &m.config.frontend_attributes {
        Some(AttrValue::FrontendAttrs(kv)) => kv.iter().any(|(k, _)| k.starts_with("xla.sdy")),
        _ => false,
    };
    !header_mesh && !custom_call_targets(m).any(is_unpartitioned_marker)
}

/// An unpartitioned module runs on one device as the global program. That is
/// wrong for GSPMD manual regions that change shape between global and per-shard
/// arrays: their bodies work on shards, with real collectives. (Shardy's manual
/// regions run on every device of their mesh, see `manual`.)
pub fn check_runs_unpartitioned(m: &Module) -> Result<(), InterpError> {
    let leaf_dims = |s: &tpusim_hlo::Shape| -> Vec<Vec<i64>> {
        s.leaves().iter().map(|a| a.dims.clone()).collect()
    };
    for ins in m.instrs.iter().filter(|i| i.opcode == Opcode::CustomCall) {
        let Some(t) = ins
            .attr_ident("custom_call_target")
            .filter(|t| is_manual_marker(t))
        else {
            continue;
        };
        let operands: Vec<Vec<i64>> = ins
            .operands
            .iter()
            .flat_map(|&o| leaf_dims(&m.instr(o).shape))
            .collect();
        if operands != leaf_dims(&ins.shape) {
            return Err(InterpError::Unsupported(format!(
                "manual (shard_map) region ('{t}' at '{}') in an unpartitioned module; \
                 run the partitioned (post-optimization) HLO",
                ins.name
            )));
        }
    }
    Ok(())
}

/// The shardings of the entry root's leaves (`leaves` of them), if it has one;
/// a single sharding on a tuple applies to every leaf.
pub fn root_shardings(
    m: &Module,
    leaves: usize,
) -> Result<Option<Vec<SingleSharding>>, InterpError> {
    match m.instr(m.entry().root).attr("sharding") {
        None => Ok(None),
        Some(AttrValue::Sharding(s)) => match &**s {
            tpusim_hlo::attr::Sharding::Single(s) => Ok(Some(vec![s.clone(); leaves])),
            tpusim_hlo::attr::Sharding::Tuple(t) if t.len() == leaves => Ok(Some(t.clone())),
            tpusim_hlo::attr::Sharding::Tuple(t) => Err(InterpError::BadArgument(format!(
                "the root's tuple sharding has {} elements for {leaves} outputs",
                t.len()
            ))),
        },
        Some(_) => Err(InterpError::Internal(
            "sharding attribute of unexpected kind".into(),
        )),
    }
}

/// Parses sharding text as written in HLO (`{replicated}`, `{devices=[2,1]<=[2]}`,
/// `{{replicated}, {maximal device=0}}`) into one sharding per output leaf.
pub fn parse_shardings(text: &str, leaves: usize) -> Result<Vec<SingleSharding>, InterpError> {
    // The HLO parser owns the sharding grammar: parse it on a one-parameter module.
    let module =
        format!("HloModule s\nENTRY e {{\n  ROOT p = f32[] parameter(0), sharding={text}\n}}\n");
    let bad = || InterpError::BadArgument(format!("'{text}' is not an HLO sharding"));
    let m = tpusim_hlo::parse_module(&module).map_err(|_| bad())?;
    root_shardings(&m, leaves)?.ok_or_else(bad)
}

/// What an unpartitioned module (the program before XLA's SPMD partitioner)
/// says about the `leaves` outputs of its partitioned form: its root's
/// shardings, or else the global dims of its root's leaves (the shardings are
/// then inferred from the devices' values where that is unambiguous).
pub type OutputLayout = (Option<Vec<SingleSharding>>, Option<Vec<Vec<usize>>>);

/// The [`OutputLayout`] `unpartitioned` gives a partitioned module with `leaves` outputs.
pub fn outputs_of_unpartitioned(
    unpartitioned: &Module,
    leaves: usize,
) -> Result<OutputLayout, InterpError> {
    if let Some(s) = root_shardings(unpartitioned, leaves)? {
        return Ok((Some(s), None));
    }
    let dims: Vec<Vec<usize>> = unpartitioned
        .instr(unpartitioned.entry().root)
        .shape
        .leaves()
        .iter()
        .map(|a| a.dims.iter().map(|&d| d.max(0) as usize).collect())
        .collect();
    if dims.len() != leaves {
        return Err(InterpError::BadArgument(format!(
            "its entry root has {} outputs, the module {leaves}",
            dims.len()
        )));
    }
    Ok((None, Some(dims)))
}

fn replicated() -> SingleSharding {
    SingleSharding {
        kind: ShardingKind::Replicated,
        last_tile_dim_replicate: false,
        last_tile_dims: Vec::new(),
        shard_group: None,
        metadata: None,
    }
}

/// The sharding of leaf `leaf` of a `sharding=` attribute, if there is one.
pub fn leaf_sharding(
    attr: Option<&AttrValue>,
    leaf: usize,
) -> Result<Option<SingleSharding>, InterpError> {
    match attr {
        None => Ok(None),
        Some(AttrValue::Sharding(s)) => match &**s {
            tpusim_hlo::attr::Sharding::Single(s) => Ok(Some(s.clone())),
            tpusim_hlo::attr::Sharding::Tuple(t) => {
                t.get(leaf).cloned().map(Some).ok_or_else(|| {
                    InterpError::BadArgument(format!("tuple sharding has no element {leaf}"))
                })
            }
        },
        Some(other) => Err(InterpError::Internal(format!(
            "sharding attribute of unexpected kind {other:?}"
        ))),
    }
}

/// The sharding of leaf `leaf`, replicated when the attribute is absent.
pub fn single_of(attr: Option<&AttrValue>, leaf: usize) -> Result<SingleSharding, InterpError> {
    Ok(leaf_sharding(attr, leaf)?.unwrap_or_else(replicated))
}

/// Which tile of the global array each device holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileMap {
    /// Number of tiles along each data dimension.
    pub tiles: Vec<usize>,
    /// Tile coordinates of every device.
    pub device_tile: Vec<Vec<usize>>,
    /// For maximal shardings: the one device whose value counts.
    pub owner: Option<usize>,
}

impl TileMap {
    /// The tile map of `s` for an array of `rank` dims over `n` devices.
    pub fn new(s: &SingleSharding, rank: usize, n: usize) -> Result<TileMap, String> {
        let whole = |owner| TileMap {
            tiles: vec![1; rank],
            device_tile: vec![vec![0; rank]; n],
            owner,
        };
        match &s.kind {
            ShardingKind::Replicated => Ok(whole(None)),
            ShardingKind::Maximal { device } => {
                let d = usize::try_from(*device)
                    .ok()
                    .filter(|&d| d < n)
                    .ok_or_else(|| format!("maximal sharding on device {device} of {n}"))?;
                Ok(whole(Some(d)))
            }
            ShardingKind::Tiled(ta) => Self::tiled(ta, s, rank, n),
            other => Err(format!(
                "sharding {other:?} is not supported for entry values"
            )),
        }
    }

    fn tiled(
        ta: &TileAssignment,
        s: &SingleSharding,
        rank: usize,
        n: usize,
    ) -> Result<TileMap, String> {
        let extra = usize::from(s.last_tile_dim_replicate) + s.last_tile_dims.len();
        if ta.dims.len() != rank + extra || ta.dims.iter().any(|&d| d < 1) {
            return Err(format!(
                "tile assignment {:?} does not fit an array of rank {rank}",
                ta.dims
            ));
        }
        let dims: Vec<usize> = ta.dims.iter().map(|&d| d as usize).collect();
        let devices = ta.devices.expand();
        let total: usize = dims.iter().product();
        if devices.len() != total || total != n {
            return Err(format!(
                "tile assignment {:?} lists {} devices; the module has {n}",
                ta.dims,
                devices.len()
            ));
        }
        let st = strides(&dims);
        let mut device_tile: Vec<Option<Vec<usize>>> = vec![None; n];
        for (pos, &dev) in devices.iter().enumerate() {
            let d = usize::try_from(dev)
                .ok()
                .filter(|&d| d < n)
                .ok_or_else(|| format!("device {dev} out of range (0..{n})"))?;
            let coords: Vec<usize> = (0..rank).map(|i| pos / st[i] % dims[i]).collect();
            if device_tile[d].replace(coords).is_some() {
                return Err(format!("device {d} appears twice in the tile assignment"));
            }
        }
        Ok(TileMap {
            tiles: dims[..rank].to_vec(),
            device_tile: device_tile
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect(),
            owner: None,
        })
    }

    /// The shard of every device; `shard_dims` are the per-device dims.
    pub fn split(&self, global: &Array, shard_dims: &[usize]) -> Result<Vec<Array>, String> {
        self.check_dims(&global.dims, shard_dims)?;
        self.device_tile
            .iter()
            .map(|tile| {
                let offsets: Vec<usize> = tile.iter().zip(shard_dims).map(|(t, s)| t * s).collect();
                let mut out =
                    Array::zeros(global.ty, shard_dims.to_vec()).map_err(|e| e.to_string())?;
                for_each_block_run(&global.dims, &offsets, shard_dims, |g, b, n| {
                    out.data.copy_run(b, &global.data, g, n)
                })
                .map_err(|e| e.to_string())?;
                Ok(out)
            })
            .collect()
    }

    /// The global array from every device's shard. Global dims are `global` when
    /// given (dropping padding), else shard dims × tiles.
    pub fn assemble(&self, shards: &[&Array], global: Option<&[usize]>) -> Result<Array, String> {
        let first = shards.first().ok_or("no shards")?;
        if shards.len() != self.device_tile.len() {
            return Err(format!(
                "{} shards for {} devices",
                shards.len(),
                self.device_tile.len()
            ));
        }
        if shards
            .iter()
            .any(|s| !same_dims(&s.dims, &first.dims) || s.ty != first.ty)
        {
            return Err("devices returned shards of different shapes".into());
        }
        let shard_dims = &first.dims;
        let global: Vec<usize> = match global {
            Some(g) => g.to_vec(),
            None => shard_dims
                .iter()
                .zip(&self.tiles)
                .map(|(s, t)| s * t)
                .collect(),
        };
        self.check_dims(&global, shard_dims)?;
        let mut out = Array::zeros(first.ty, global.clone()).map_err(|e| e.to_string())?;
        let mut done: Vec<Vec<usize>> = Vec::new();
        let order: Vec<usize> = match self.owner {
            Some(o) => vec![o],
            None => (0..shards.len()).collect(),
        };
        for d in order {
            let tile = &self.device_tile[d];
            if done.contains(tile) {
                continue;
            }
            done.push(tile.clone());
            let offsets: Vec<usize> = tile.iter().zip(shard_dims).map(|(t, s)| t * s).collect();
            for_each_block_run(&global, &offsets, shard_dims, |g, b, n| {
                out.data.copy_run(g, &shards[d].data, b, n)
            })
            .map_err(|e| e.to_string())?;
        }
        Ok(out)
    }

    /// Shards hold `ceil(global / tiles)` elements along each dim.
    fn check_dims(&self, global: &[usize], shard: &[usize]) -> Result<(), String> {
        let ok = global.len() == shard.len()
            && global.len() == self.tiles.len()
            && global
                .iter()
                .zip(shard)
                .zip(&self.tiles)
                .all(|((&g, &s), &t)| g.div_ceil(t) == s);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "global dims {global:?} do not split into {:?} tiles of {shard:?}",
                self.tiles
            ))
        }
    }
}

/// Calls `f(global_start, block_start, len)` for every contiguous run of the
/// minor dim in the block at `offsets` of size `block` (the part of it inside
/// `global`), in row-major order. Splitting or assembling an array by runs
/// needs no table of element positions, so no memory beyond the two arrays.
pub(crate) fn for_each_block_run(
    global: &[usize],
    offsets: &[usize],
    block: &[usize],
    mut f: impl FnMut(usize, usize, usize) -> Result<(), InterpError>,
) -> Result<(), InterpError> {
    let rank = block.len();
    if global.len() != rank || offsets.len() != rank {
        return Err(InterpError::Internal("block rank mismatch".into()));
    }
    let gs = strides(global);
    let bs = strides(block);
    // Extent of the block inside the global array, per dim.
    let extent: Vec<usize> = (0..rank)
        .map(|i| block[i].min(global[i].saturating_sub(offsets[i])))
        .collect();
    if extent.contains(&0) {
        return Ok(());
    }
    let (run, outer) = match rank {
        0 => (1, 0),
        r => (extent[r - 1], r - 1),
    };
    let minor_offset = if rank == 0 { 0 } else { offsets[rank - 1] };
    let mut coord = vec![0usize; outer];
    loop {
        let b_start: usize = (0..outer).map(|i| coord[i] * bs[i]).sum();
        let g_start: usize = (0..outer)
            .map(|i| (offsets[i] + coord[i]) * gs[i])
            .sum::<usize>()
            + minor_offset;
        f(g_start, b_start, run)?;
        // Next outer coordinate (odometer, minor-most first).
        let mut i = outer;
        loop {
            if i == 0 {
                return Ok(());
            }
            i -= 1;
            coord[i] += 1;
            if coord[i] < extent[i] {
                break;
            }
            coord[i] = 0;
        }
    }
}

/// Works out the sharding of an output that carries none, from the devices'
/// values: replicated when all devices agree (and the global dims, if known, are
/// the shard's), else a tiling over the global dims whose device order keeps
/// every tile's copies equal (iota order first). Fails when that is ambiguous.
pub fn infer_output_sharding(
    shards: &[&Array],
    global: Option<&[usize]>,
) -> Result<SingleSharding, String> {
    let first = shards.first().ok_or("no devices")?;
    let all_equal = shards.iter().all(|s| s == first);
    let shard_dims = &first.dims;
    if all_equal && global.is_none_or(|g| g == shard_dims.as_slice()) {
        return Ok(replicated());
    }
    let global = global.ok_or("the devices' values differ and the global shape is unknown")?;
    if global.len() != shard_dims.len()
        || shard_dims
            .iter()
            .zip(global)
            .any(|(&s, &g)| s == 0 && g != 0)
    {
        return Err(format!(
            "global dims {global:?} do not fit shards of {shard_dims:?}"
        ));
    }
    let tiles: Vec<usize> = global
        .iter()
        .zip(shard_dims)
        .map(|(&g, &s)| if s == 0 { 1 } else { g.div_ceil(s) })
        .collect();
    let n = shards.len();
    let k: usize = tiles.iter().product();
    if k == 0 || !n.is_multiple_of(k) {
        return Err(format!("{k} tiles do not divide {n} devices"));
    }
    let rep = n / k;
    // Axes of the tile-assignment array: the data dims, then the replication dim.
    let mut axis_sizes: Vec<usize> = tiles.clone();
    axis_sizes.push(rep);
    let varying: Vec<usize> = (0..axis_sizes.len())
        .filter(|&a| axis_sizes[a] > 1)
        .collect();
    let mut fits: Vec<Vec<usize>> = permutations(&varying)
        .iter()
        .map(|order| devices_in_order(&axis_sizes, order))
        .filter(|devices| copies_agree(shards, devices, &axis_sizes))
        .collect();
    fits.sort();
    fits.dedup();
    let devices = match fits.as_slice() {
        [one] => one,
        [] => return Err("no device order over the tiles keeps replicated copies equal".into()),
        _ => {
            return Err(format!(
                "{} device orders fit the values (ambiguous)",
                fits.len()
            ))
        }
    };
    let mut dims: Vec<i64> = tiles.iter().map(|&t| t as i64).collect();
    if rep > 1 {
        dims.push(rep as i64);
    }
    Ok(SingleSharding {
        kind: ShardingKind::Tiled(TileAssignment {
            dims,
            devices: DeviceList::Explicit(devices.iter().map(|&d| d as i64).collect()),
        }),
        last_tile_dim_replicate: rep > 1,
        ..replicated()
    })
}

/// Device ids at every position (row-major) of an array with `sizes`, numbering
/// devices with the axes of `order` most significant first.
fn devices_in_order(sizes: &[usize], order: &[usize]) -> Vec<usize> {
    let n: usize = sizes.iter().product();
    let st = strides(sizes);
    (0..n)
        .map(|pos| {
            order
                .iter()
                .fold(0, |id, &a| id * sizes[a] + pos / st[a] % sizes[a])
        })
        .collect()
}

/// Whether devices that hold the same tile (differ only in the last axis) agree.
fn copies_agree(shards: &[&Array], devices: &[usize], sizes: &[usize]) -> bool {
    let rep = sizes.last().copied().unwrap_or(1);
    devices
        .chunks(rep.max(1))
        .all(|c| c.iter().all(|&d| shards[d] == shards[c[0]]))
}

/// All orderings of `items`, the given order first. At most 720 (6 axes).
fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() > 6 {
        return vec![items.to_vec()];
    }
    let mut out = vec![Vec::new()];
    for _ in 0..items.len() {
        out = out
            .into_iter()
            .flat_map(|p: Vec<usize>| {
                items
                    .iter()
                    .filter(|i| !p.contains(i))
                    .map(|&i| {
                        let mut q = p.clone();
                        q.push(i);
                        q
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
    }
    out
}

/// Splits a global value into the shards of `n` devices (used by tests and tools).
pub fn split_value(
    s: &SingleSharding,
    global: &Array,
    shard_dims: &[usize],
    n: usize,
) -> Result<Vec<Value>, String> {
    Ok(TileMap::new(s, shard_dims.len(), n)?
        .split(global, shard_dims)?
        .into_iter()
        .map(Value::Array)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpusim_hlo::PrimitiveType as T;

    fn tiled(dims: &[i64], devices: DeviceList, rep: bool) -> SingleSharding {
        SingleSharding {
            kind: ShardingKind::Tiled(TileAssignment {
                dims: dims.to_vec(),
                devices,
            }),
            last_tile_dim_replicate: rep,
            ..replicated()
        }
    }

    fn iota(n: i64) -> Array {
        Array::from_i64s(T::S32, vec![n as usize], &(0..n).collect::<Vec<_>>())
    }

    #[test]
    fn uneven_split_pads_and_assembles_back() {
        let s = tiled(&[4], DeviceList::Explicit(vec![0, 1, 2, 3]), false);
        let map = TileMap::new(&s, 1, 4).unwrap();
        let g = iota(10);
        let shards = map.split(&g, &[3]).unwrap();
        assert_eq!(shards[3].to_index_i64s().unwrap(), vec![9, 0, 0]);
        let refs: Vec<&Array> = shards.iter().collect();
        assert_eq!(map.assemble(&refs, Some(&[10])).unwrap(), g);
    }

    #[test]
    fn transposed_iota_with_replication() {
        // devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate: column tile j is
        // held by devices j and j+4.
        let s = tiled(
            &[1, 4, 2],
            DeviceList::Iota {
                reshape: vec![2, 4],
                transpose: vec![1, 0],
            },
            true,
        );
        let map = TileMap::new(&s, 2, 8).unwrap();
        assert_eq!(map.device_tile[1], vec![0, 1]);
        assert_eq!(map.device_tile[5], vec![0, 1]);
        assert_eq!(map.device_tile[3], vec![0, 3]);
    }

    #[test]
    fn infers_row_tiles_replicated_over_groups() {
        let a = iota(4);
        let b = Array::from_i64s(T::S32, vec![4], &[5, 6, 7, 8]);
        let shards: Vec<&Array> = vec![&a, &a, &b, &b];
        let s = infer_output_sharding(&shards, Some(&[8])).unwrap();
        let map = TileMap::new(&s, 1, 4).unwrap();
        let out = map.assemble(&shards, Some(&[8])).unwrap();
        assert_eq!(out.to_index_i64s().unwrap(), vec![0, 1, 2, 3, 5, 6, 7, 8]);
        // Interleaved copies need the other device order.
        let shards: Vec<&Array> = vec![&a, &b, &a, &b];
        let s = infer_output_sharding(&shards, Some(&[8])).unwrap();
        let out = TileMap::new(&s, 1, 4)
            .unwrap()
            .assemble(&shards, Some(&[8]))
            .unwrap();
        assert_eq!(out.to_index_i64s().unwrap(), vec![0, 1, 2, 3, 5, 6, 7, 8]);
        assert!(infer_output_sharding(&shards, None).is_err());
    }

    #[test]
    fn bad_tile_assignment_is_an_error() {
        let s = tiled(&[3], DeviceList::Explicit(vec![0, 1, 1]), false);
        assert!(TileMap::new(&s, 1, 3).is_err());
        assert!(TileMap::new(&s, 2, 3).is_err());
    }

    fn module(text: &str) -> Module {
        tpusim_hlo::parse_module(text).expect("parses")
    }

    #[test]
    fn unpartitioned_root_gives_shardings_else_global_dims() {
        let sharded = module(
            "HloModule u\nENTRY e {\n  a = f32[8,4] parameter(0)\n  \
             ROOT b = f32[8,4] negate(a), sharding={devices=[2,1]<=[2]}\n}\n",
        );
        let (shardings, dims) = outputs_of_unpartitioned(&sharded, 1).unwrap();
        assert_eq!(shardings.unwrap().len(), 1);
        assert!(dims.is_none());
        let plain = module(
            "HloModule u\nENTRY e {\n  a = f32[8,4] parameter(0)\n  b = f32[3] parameter(1)\n  \
             ROOT t = (f32[8,4], f32[3]) tuple(a, b)\n}\n",
        );
        let (shardings, dims) = outputs_of_unpartitioned(&plain, 2).unwrap();
        assert!(shardings.is_none());
        assert_eq!(dims.unwrap(), vec![vec![8, 4], vec![3]]);
        let err = outputs_of_unpartitioned(&plain, 3).unwrap_err();
        assert!(matches!(err, InterpError::BadArgument(_)), "{err}");
    }
}
