//! The TensorCore model: the time of one kernel from how a TPU executes it.
//!
//! A kernel is a pipeline of tiles on each core. HBM→VMEM DMAs bring operand
//! tiles in and results out, double-buffered: of a core's T tiles, T-1 steps
//! take `max(compute, DMA)` per tile, and the first tile's load (prologue)
//! and the last tile's compute and store (epilogue) overlap nothing, plus a
//! fixed launch cost. Inside a program the prologue's and epilogue's DMAs
//! overlap the neighbouring kernels. A matmul's tiles are output blocks of
//! `matmul_block_edge` squared with K in `matmul_block_depth` slices, so a
//! mid-size GEMM of a few blocks runs its load, compute and store nearly in
//! turn, while a large one hides all but its busiest unit; a streaming
//! kernel's tiles are small (eight registers). Compute is the busier of:
//! - the **MXUs**: a dot is cut into `mxu_dim × mxu_dim` weight tiles (K and
//!   N padded to the MXU edge, rows padded to the 8 sublanes); every tile is
//!   loaded into one MXU and the rows stream through it, one row per cycle.
//!   The tiles are spread over all MXUs of all TensorCores of the device.
//!   An MXU pays a weight load per tile when too few rows stream to hide
//!   it, a result pop per pass (a tile times a block of `mxu_dim` rows), and
//!   one array fill and drain per kernel (batch dims share it). XLA may feed
//!   either operand as the stationary one; the cheaper schedule is taken.
//! - the **VPU/XLU**: vector flops and transcendentals at the VPU rate,
//!   transposes over the XLU one vreg per cycle per core, and the registers
//!   the kernel loads and stores through each core's load/store slots
//!   (`vreg_moves_per_cycle`): an array of a single row fills one sublane of
//!   each register, so it moves 8x the registers its bytes need, and a kernel
//!   of one row tile runs on one core.
//!
//! Arrays move in their tiled layout: the minor dim is padded to 128 lanes
//! and the second-minor to the 8 sublanes. Size-1 dims are dropped and the
//! pair of dims tiled as (rows, lanes) is the one with the least padding
//! (XLA's layout assignment picks layouts).
//!
//! Constants come from the chip file's `[tensorcore]` table; a chip without
//! one is timed by the plain roofline (see `op.rs`).

use tpusim_arch::{Chip, MatmulDtype, TensorCoreTiming};
use tpusim_hlo::attr::AttrValue;
use tpusim_hlo::{InstrId, Module, Opcode, PrimitiveType, Shape};

use crate::op::{MatmulInfo, SUBLANES};

/// Where an op runs and what state it finds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimingContext {
    /// The kernel runs inside a program among other kernels: its fixed cost
    /// is `in_program_kernel_s`, not a lone kernel's `kernel_launch_s`.
    pub in_program: bool,
    /// The kernel's matmul operands are still on chip from an identical
    /// previous run (back-to-back microbenchmarks): operands that fit in
    /// CMEM are read from it.
    pub warm_operands: bool,
}

/// How a dot was scheduled on the MXUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MxuSchedule {
    /// Rows streamed through each weight tile (padded to the sublanes).
    pub rows: u64,
    /// Whether the LHS is the stationary operand (XLA swapped the roles).
    pub swapped: bool,
    /// Weight tiles over all batch elements.
    pub tiles: u64,
    /// Passes: tiles × row blocks of `mxu_dim` rows.
    pub passes: u64,
    /// Pipeline blocks: the output cut into `matmul_block_edge` squares
    /// and K into `matmul_block_depth` slices, over all batch elements.
    pub blocks: u64,
    /// MXUs the tiles are spread over.
    pub mxus: u64,
    /// Cycles per MXU streaming rows.
    pub stream_cycles: f64,
    /// Cycles per MXU loading weights (when not hidden by streaming).
    pub weight_load_cycles: f64,
    /// Cycles per MXU popping pass results.
    pub pass_overhead_cycles: f64,
    /// Fill and drain of the array, once per kernel.
    pub fill_drain_cycles: f64,
    /// bf16 passes per product (1, 3 or 6).
    pub precision_passes: u32,
    /// Total cycles per MXU.
    pub cycles: f64,
}

/// The model's account of one kernel, for `--explain`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelExplain {
    pub mxu: Vec<MxuSchedule>,
    /// Bytes read and written in the tiled layout.
    pub bytes_in: f64,
    pub bytes_out: f64,
    /// Of the bytes read, those served from CMEM (warm operands).
    pub bytes_from_cmem: f64,
    /// DMA tiles (one per MXU pass for dots, one per 8×128 vreg block of
    /// `dma_tile_bytes` for streaming kernels) and bytes per tile.
    pub dma_tiles: u64,
    pub dma_bytes_per_tile: f64,
    pub mxu_s: f64,
    pub vpu_s: f64,
    pub xlu_s: f64,
    /// Registers loaded and stored (the kernel's operands and results) and
    /// the time to move them through the cores' load/store slots.
    pub vregs: f64,
    pub vreg_s: f64,
    pub dma_s: f64,
    /// Tiles each core's pipeline runs (at least 1).
    pub tiles_per_core: f64,
    /// The first tile's load (0 inside a program, where it overlaps the
    /// previous kernel).
    pub prologue_s: f64,
    /// The last tile's compute and store (inside a program, its compute).
    pub epilogue_s: f64,
    pub fixed_s: f64,
    pub time_s: f64,
    /// Custom call priced from its cost estimate or recognized from its
    /// shapes, or not priced at all.
    pub custom_call: Option<String>,
    /// The custom call's own (flops, transcendentals, bytes accessed; 0 bytes
    /// for a recognized kernel, whose traffic the model takes from its
    /// operands and results, or from what it reads of them).
    pub estimate: Option<(f64, f64, f64)>,
    pub notes: Vec<String>,
}

impl KernelExplain {
    /// Schedules `mm` on the MXUs and adds its time; returns its pipeline
    /// blocks.
    fn run_on_mxus(&mut self, chip: &Chip, tc: &TensorCoreTiming, mm: &MatmulInfo) -> u64 {
        let s = schedule_matmul(chip, tc, mm);
        self.mxu_s += s.cycles / chip.clock_hz;
        let blocks = s.blocks;
        self.mxu.push(s);
        blocks
    }
}

/// Bytes of one array in the TPU's tiled layout (see the module doc).
pub fn tiled_bytes(ty: PrimitiveType, dims: &[i64], lanes: u64) -> f64 {
    let width = ty.byte_size().max(1);
    match tiled_pair(dims, lanes) {
        None => 0.0,
        Some(t) => t.padded_elems(lanes) as f64 * width as f64,
    }
}

/// An array as the TPU tiles it: `rest` copies of a (rows, cols) matrix
/// whose rows go to the sublanes and cols to the lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiling {
    rest: u64,
    rows: u64,
    cols: u64,
    /// A vector (one dim): stored densely along the lanes, one row per
    /// register when loaded.
    vector: bool,
}

impl Tiling {
    /// Elements with rows padded to the 8 sublanes and cols to the lanes.
    /// Rows pad to 8 for every type: measured bf16 kernels on 8-row arrays
    /// run as fast per byte as on 16-row ones (XLA picks a small tile
    /// rather than a packed 16-row one).
    fn padded_elems(&self, lanes: u64) -> u64 {
        if self.vector {
            // A scalar is one element.
            return if self.cols <= 1 {
                1
            } else {
                self.cols.div_ceil(lanes) * lanes
            };
        }
        let tile = self.rows.div_ceil(SUBLANES) * SUBLANES * self.cols.div_ceil(lanes) * lanes;
        self.rest.saturating_mul(tile)
    }
}

/// The tiling of an array with the least padding (size-1 dims dropped; any
/// two dims may be the tiled pair, as XLA's layout assignment is free to
/// pick them); a vector is one row. `None` for an empty array.
fn tiled_pair(dims: &[i64], lanes: u64) -> Option<Tiling> {
    let dims: Vec<u64> = dims
        .iter()
        .map(|&d| d.max(0) as u64)
        .filter(|&d| d != 1)
        .collect();
    if dims.contains(&0) {
        return None;
    }
    match dims.as_slice() {
        [] => Some(Tiling {
            rest: 1,
            rows: 1,
            cols: 1,
            vector: true,
        }),
        [n] => Some(Tiling {
            rest: 1,
            rows: 1,
            cols: *n,
            vector: true,
        }),
        _ => {
            let mut best: Option<(u64, Tiling)> = None;
            for (i, &r) in dims.iter().enumerate() {
                for (j, &c) in dims.iter().enumerate() {
                    if i == j {
                        continue;
                    }
                    let rest: u64 = dims
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| *k != i && *k != j)
                        .map(|(_, &d)| d)
                        .fold(1u64, |a, d| a.saturating_mul(d));
                    let t = Tiling {
                        rest,
                        rows: r,
                        cols: c,
                        vector: false,
                    };
                    let elems = t.padded_elems(lanes);
                    if best.is_none_or(|(b, _)| elems < b) {
                        best = Some((elems, t));
                    }
                }
            }
            best.map(|(_, t)| t)
        }
    }
}

/// Vector registers (8 sublanes x 128 lanes of 32-bit words) one array
/// fills, and its row tiles (the unit the cores split): a 16-bit array packs
/// 16 rows per register, an 8-bit one 32, and an array of a single row
/// fills one sublane of each register.
fn array_vregs(ty: PrimitiveType, dims: &[i64], lanes: u64) -> (f64, f64) {
    let width = ty.byte_size().max(1);
    let rows_per_vreg = SUBLANES * (4 / width).max(1);
    let words = (width / 4).max(1);
    match tiled_pair(dims, lanes) {
        None => (0.0, 0.0),
        Some(t) => {
            let row_tiles = t.rest.saturating_mul(t.rows.div_ceil(rows_per_vreg));
            let vregs = row_tiles
                .saturating_mul(t.cols.div_ceil(lanes))
                .saturating_mul(words);
            (vregs as f64, row_tiles as f64)
        }
    }
}

/// What a kernel moves of some arrays: bytes in the tiled layout, vector
/// registers, and the most row tiles any of them has.
#[derive(Clone, Copy, Debug, Default)]
struct Traffic {
    bytes: f64,
    vregs: f64,
    row_tiles: f64,
}

impl Traffic {
    fn of_shape(s: &Shape, lanes: u64) -> Traffic {
        let (vregs, row_tiles) = shape_vregs(s, lanes);
        Traffic {
            bytes: shape_tiled_bytes(s, lanes),
            vregs,
            row_tiles,
        }
    }

    /// `bytes` read or written densely (a slice, an in-place update).
    fn dense(bytes: f64, lanes: u64) -> Traffic {
        Traffic {
            bytes,
            vregs: bytes / (SUBLANES * lanes * 4) as f64,
            row_tiles: 1.0,
        }
    }

    fn add(&mut self, o: Traffic) {
        self.bytes += o.bytes;
        self.vregs += o.vregs;
        self.row_tiles = self.row_tiles.max(o.row_tiles);
    }
}

fn shape_vregs(s: &Shape, lanes: u64) -> (f64, f64) {
    s.leaves()
        .iter()
        .map(|a| array_vregs(a.ty, &a.dims, lanes))
        .fold((0.0, 0.0), |(v, r), (av, ar)| (v + av, r.max(ar)))
}

fn shape_tiled_bytes(s: &Shape, lanes: u64) -> f64 {
    s.leaves()
        .iter()
        .map(|a| tiled_bytes(a.ty, &a.dims, lanes))
        .sum()
}

/// The MXU edge and the MXUs behind one device (a GPU, which has neither,
/// reads as one 128-wide array).
fn mxu_geometry(chip: &Chip) -> (u64, u64) {
    let d = u64::from(chip.mxu_dim().unwrap_or(128));
    let mxus = u64::from(chip.mxus_per_device().unwrap_or(1)).max(1);
    (d, mxus)
}

/// Cycles per MXU of one dot under one operand role assignment.
fn mxu_schedule(chip: &Chip, tc: &TensorCoreTiming, mm: &MatmulInfo, swapped: bool) -> MxuSchedule {
    let (d, mxus) = mxu_geometry(chip);
    let (rows, cols) = if swapped { (mm.n, mm.m) } else { (mm.m, mm.n) };
    let rows = rows.div_ceil(SUBLANES).max(1) * SUBLANES;
    let tiles = mm
        .batch
        .max(1)
        .saturating_mul(mm.k.div_ceil(d).max(1))
        .saturating_mul(cols.div_ceil(d).max(1));
    let passes = tiles.saturating_mul(rows.div_ceil(d));
    let edge = tc.matmul_block_edge.max(1);
    let blocks = mm
        .batch
        .max(1)
        .saturating_mul(rows.div_ceil(edge))
        .saturating_mul(cols.div_ceil(edge).max(1))
        .saturating_mul(mm.k.div_ceil(tc.matmul_block_depth.max(1)).max(1));
    let per_mxu = |n: u64| n.div_ceil(mxus) as f64;
    // Narrow types (int8, fp8 where the chip has a faster rate for them)
    // stream more rows per cycle through the array: the chip file's peak
    // for the type over its bf16 peak.
    let bf16 = chip.peak_flops(MatmulDtype::Bf16);
    let rate = chip.peak_flops(mm.dtype) / bf16;
    let rate = if rate.is_finite() && rate > 1.0 {
        rate
    } else {
        1.0
    };
    let stream = tiles as f64 * rows as f64 / mxus as f64 / rate;
    let load = per_mxu(tiles) * tc.mxu_weight_load_cycles;
    let pass_overhead = per_mxu(passes) * tc.mxu_pass_overhead_cycles;
    let fill = tc.mxu_fill_drain_cycles;
    let precision_passes = mm.passes.max(1);
    let cycles = (stream.max(load) + pass_overhead + fill) * f64::from(precision_passes);
    MxuSchedule {
        rows,
        swapped,
        tiles,
        passes,
        blocks,
        mxus,
        stream_cycles: stream,
        weight_load_cycles: (load - stream).max(0.0),
        pass_overhead_cycles: pass_overhead,
        fill_drain_cycles: fill,
        precision_passes,
        cycles,
    }
}

/// A bf16 matmul of `flops` in the MXUs' best shape: one full weight tile
/// per MXU (K and N of the MXU edge) and as many rows streamed through
/// each as the flops take.
fn dense_equivalent(chip: &Chip, flops: f64) -> MatmulInfo {
    let (d, mxus) = mxu_geometry(chip);
    let per_row = 2.0 * (mxus * d * d) as f64;
    let rows = ((flops / per_row).ceil() as u64).max(1);
    crate::op::matmul_info(chip, MatmulDtype::Bf16, 1, mxus, rows, d, d, flops)
}

/// The cheaper of the two role assignments of a dot.
pub fn schedule_matmul(chip: &Chip, tc: &TensorCoreTiming, mm: &MatmulInfo) -> MxuSchedule {
    let a = mxu_schedule(chip, tc, mm, false);
    let b = mxu_schedule(chip, tc, mm, true);
    if b.cycles < a.cycles {
        b
    } else {
        a
    }
}

/// The `cost_estimate` of a Pallas/Mosaic `tpu_custom_call`:
/// (flops, transcendentals, bytes accessed).
pub fn custom_call_estimate(m: &Module, id: InstrId) -> Option<(f64, f64, f64)> {
    let ins = m.instr(id);
    let AttrValue::Str(config) = ins.attr("backend_config")? else {
        return None;
    };
    let json: serde_json::Value = serde_json::from_str(config).ok()?;
    let est = find_key(&json, "cost_estimate", 0)?;
    let num = |k: &str| {
        let v = &est[k];
        v.as_f64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .unwrap_or(0.0)
    };
    Some((num("flops"), num("transcendentals"), num("bytes_accessed")))
}

fn find_key<'a>(v: &'a serde_json::Value, key: &str, depth: u32) -> Option<&'a serde_json::Value> {
    if depth > 16 {
        return None;
    }
    match v {
        serde_json::Value::Object(map) => map
            .get(key)
            .or_else(|| map.values().find_map(|x| find_key(x, key, depth + 1))),
        serde_json::Value::Array(xs) => xs.iter().find_map(|x| find_key(x, key, depth + 1)),
        _ => None,
    }
}

/// Inputs to the kernel model that `op.rs` already computed.
pub struct KernelInputs<'a> {
    pub matmuls: &'a [MatmulInfo],
    /// Flops and transcendentals for the VPU (matmul flops excluded).
    pub vector_flops: f64,
    pub transcendentals: f64,
    pub vector_flops_per_s: f64,
    pub transcendental_cost: f64,
}

/// Times one kernel with the TensorCore model.
pub fn kernel_time(
    m: &Module,
    chip: &Chip,
    tc: &TensorCoreTiming,
    id: InstrId,
    k: &KernelInputs,
    ctx: TimingContext,
) -> KernelExplain {
    let ins = m.instr(id);
    let lanes = chip.tpu.as_ref().map_or(128, |t| u64::from(t.vpu_lanes));
    let cores = chip.tensorcores_per_device().unwrap_or(1).max(1) as f64;
    let mut e = KernelExplain::default();
    let mut vector_flops = k.vector_flops;
    let mut transcendentals = k.transcendentals;

    // A dynamic-update-slice writes its update into the buffer in place (as
    // XLA's buffer assignment shares the operand's buffer with the result):
    // the buffer is neither read nor written whole.
    let in_place = in_place_update(m, id, lanes);
    let output = in_place.map_or_else(
        || Traffic::of_shape(&ins.shape, lanes),
        |(_, b)| Traffic::dense(b, lanes),
    );
    let mut input = Traffic::default();
    for (k, &o) in ins.operands.iter().enumerate() {
        if in_place.is_some_and(|(buffer, _)| buffer == k) {
            continue;
        }
        let whole = Traffic::of_shape(&m.instr(o).shape, lanes);
        input.add(match sliced_read(m, id, k) {
            // Only the rows a gather or slice selects are brought in.
            Some(read) if read < whole.bytes => Traffic::dense(read, lanes),
            _ => whole,
        });
    }
    e.bytes_out = output.bytes;
    e.bytes_in = input.bytes;
    if ins.opcode == Opcode::CustomCall {
        let target = match ins.attr("custom_call_target") {
            Some(AttrValue::Str(s)) => s.clone(),
            Some(other) => format!("{other:?}"),
            None => String::new(),
        };
        match custom_call_estimate(m, id) {
            Some((flops, trans, bytes)) => {
                e.estimate = Some((flops, trans, bytes));
                // A Pallas kernel's flops run on the MXUs at the bf16 rate
                // (the estimate does not say which unit, nor the shapes):
                // full passes of full weight tiles on every MXU, each pass
                // paying its overhead, as a dot's; bytes as stated.
                if flops > 0.0 {
                    e.run_on_mxus(chip, tc, &dense_equivalent(chip, flops));
                }
                transcendentals += trans;
                if bytes > 0.0 {
                    e.bytes_in = bytes - e.bytes_out.min(bytes);
                }
                e.custom_call = Some(format!(
                    "{target}: priced from its cost_estimate ({flops:.3e} flops, {trans:.3e} \
                     transcendentals, {bytes:.3e} bytes)"
                ));
            }
            None => match crate::pallas::recognize(m, id) {
                Some(kernel) => {
                    // Counted as the op's flops (bytes: its operands and
                    // results, or what it reads of them).
                    e.estimate = Some((kernel.flops(), kernel.transcendentals, 0.0));
                    // Its block matmuls on the MXUs, as a dot's tiles are.
                    for shape @ &[b, m_, k_, n] in &kernel.matmuls {
                        let flops = crate::pallas::matmul_flops(shape);
                        let mm =
                            crate::op::matmul_info(chip, MatmulDtype::Bf16, 1, b, m_, k_, n, flops);
                        e.run_on_mxus(chip, tc, &mm);
                    }
                    transcendentals += kernel.transcendentals;
                    if let Some(read) = kernel.bytes_read {
                        e.bytes_in = read;
                    }
                    e.custom_call = Some(format!(
                        "{target}: no cost_estimate; recognized from its shapes as {} ({:.3e} \
                         flops, {:.3e} transcendentals): {}",
                        kernel.kernel,
                        kernel.flops(),
                        kernel.transcendentals,
                        kernel.detail
                    ));
                }
                None => {
                    e.custom_call = Some(format!(
                        "{target}: no cost_estimate in backend_config; timed as its operand \
                         and result traffic only (compute unknown)"
                    ));
                    vector_flops = 0.0;
                }
            },
        }
    }

    let clock = chip.clock_hz;
    let mut launches = 1.0;
    let mut blocks = 0u64;
    for mm in k.matmuls {
        if is_matrix_vector(mm) {
            // XLA rewrites a dot with a size-1 non-contracting side into a
            // multiply and a reduction (dot strength reduction): VPU work,
            // two kernels, operands streamed from HBM.
            vector_flops += mm.flops;
            if mm.k > 1 {
                // K = 1 needs no reduction: a single multiply kernel.
                launches = 2.0;
            }
            e.notes.push(format!(
                "matrix-vector dot ({}x{}x{}): multiply + reduce on the VPU, not the MXU",
                mm.m, mm.n, mm.k
            ));
            continue;
        }
        if mm.k == 1 {
            // XLA's algebraic simplifier rewrites a dot whose contracting
            // dims are all size 1 into a multiply of two broadcasts. The
            // column operand's values lie along lanes in its layout and
            // must be spread over sublanes; within one 128x128 block that
            // happens in registers, beyond it a layout copy runs first (a
            // second kernel, as measured on v4: 1.1-1.2 us up to 128x128,
            // 2.0-2.4 us beyond).
            vector_flops += mm.flops;
            let copy = mm.m > lanes || mm.n > lanes;
            if copy {
                launches = 2.0;
            }
            e.notes.push(format!(
                "outer product ({}x{}x1): a multiply of broadcasts on the VPU{}, not the MXU",
                mm.m,
                mm.n,
                if copy {
                    " after a layout copy of the column operand"
                } else {
                    ""
                }
            ));
            continue;
        }
        let pipeline_blocks = e.run_on_mxus(chip, tc, mm);
        blocks = blocks.saturating_add(pipeline_blocks);
    }
    if let Some(results) = lane_reduction_results(m, id).filter(|&r| r > lanes) {
        // A reduction over the lane dim leaves one value per sublane row; a
        // result wider than one vreg row is laid out along lanes by a
        // second kernel.
        launches += 1.0;
        e.notes.push(format!(
            "reduction over the minor (lane) dim with {results} results: a second kernel lays \
             them out along lanes"
        ));
    }
    e.vpu_s = (vector_flops + transcendentals * k.transcendental_cost) / k.vector_flops_per_s;
    if is_transpose(m, id) {
        // The XLU turns one vreg (sublanes × lanes 32-bit words) per cycle per core.
        let vreg = (SUBLANES * lanes * 4) as f64;
        e.xlu_s = e.bytes_out / vreg / cores / clock;
        e.notes
            .push("transpose on the XLU, one vreg per cycle per core".into());
    }

    // The cores split a kernel by row tiles: one row tile, one core.
    let mut used = cores.min(input.row_tiles.max(output.row_tiles).max(1.0));
    if e.custom_call.is_none() {
        e.vregs = input.vregs + output.vregs;
        e.vreg_s = e.vregs / (tc.vreg_moves_per_cycle * used * clock);
    }

    let hbm = chip.memory.hbm_bandwidth_bytes_per_s * tc.hbm_efficiency;
    // Measured on v4: MXU kernels re-read warm operands from CMEM;
    // elementwise kernels and matrix-vector products stream from HBM even
    // when their data would fit.
    let warm_cmem = ctx.warm_operands
        && !e.mxu.is_empty()
        && tc.cmem_bytes > 0
        && e.bytes_in <= tc.cmem_bytes as f64;
    if warm_cmem {
        e.bytes_from_cmem = e.bytes_in;
        e.notes.push(format!(
            "operands ({:.0} KiB) fit in CMEM and are read from it (warm, back-to-back runs)",
            e.bytes_in / 1024.0
        ));
    }
    let read_s = if warm_cmem {
        e.bytes_in / tc.cmem_bandwidth_bytes_per_s
    } else {
        e.bytes_in / hbm
    };
    let write_s = e.bytes_out / hbm;
    e.dma_s = read_s + write_s;
    if blocks > 0 {
        // A dot moves one output block (and its operand slices) per step;
        // the blocks are spread over the cores.
        e.dma_tiles = blocks;
        used = cores;
    } else {
        // Streaming kernels move one (8·k, 128) block per DMA.
        let tile = (SUBLANES * lanes * 4) as f64 * 8.0;
        e.dma_tiles = ((e.bytes_in + e.bytes_out) / tile).ceil().max(1.0) as u64;
    }
    e.dma_bytes_per_tile = (e.bytes_in + e.bytes_out) / e.dma_tiles as f64;
    e.fixed_s = launches
        * if ctx.in_program {
            tc.in_program_kernel_s
        } else {
            tc.kernel_launch_s
        };
    let compute = e.mxu_s.max(e.vpu_s).max(e.xlu_s).max(e.vreg_s);
    // Each core runs its tiles as a double-buffered pipeline: tile i+1
    // loads and tile i-1 stores while tile i computes. Of T tiles, T-1
    // steps take the slower of compute and DMA; the first tile's load and
    // the last tile's compute and store overlap nothing.
    let per_core = (e.dma_tiles as f64 / used).max(1.0);
    e.tiles_per_core = per_core;
    // Inside a program the first load and the last store overlap the
    // neighbouring kernels' (a lone kernel pays them): only the last
    // tile's compute is exposed.
    e.prologue_s = if ctx.in_program {
        0.0
    } else {
        read_s / per_core
    };
    e.epilogue_s = if ctx.in_program {
        compute / per_core
    } else {
        (compute + write_s) / per_core
    };
    let steady = compute.max(e.dma_s) * (1.0 - 1.0 / per_core);
    e.time_s = steady + e.prologue_s + e.epilogue_s + e.fixed_s;
    e
}

/// How the model timed the op named `name` (in a program), as text lines;
/// `None` when the module has no such op.
pub fn explain_op(m: &Module, chip: &Chip, name: &str) -> Option<Vec<String>> {
    let k = m.instrs.iter().position(|i| i.name == name)?;
    let id = InstrId(k as u32);
    let ins = m.instr(id);
    let lone = crate::op::op_time_in(m, chip, id, TimingContext::default());
    let mut out = vec![format!(
        "explain {} ({}) on {}: {}",
        ins.name,
        ins.opcode.name(),
        chip.name,
        ins.shape
    )];
    let Some(e) = crate::op::explain_in(m, chip, id, crate::IN_PROGRAM) else {
        out.push(format!(
            "  roofline (no [tensorcore] table for {}): mxu {} | vpu {} | hbm {} + overhead {} = {}",
            chip.id,
            us(lone.mxu_s),
            us(lone.vpu_s),
            us(lone.hbm_s),
            us(lone.overhead_s),
            us(lone.time_s)
        ));
        return Some(out);
    };
    let clock = chip.clock_hz;
    let (d, _) = mxu_geometry(chip);
    for s in &e.mxu {
        out.push(format!(
            "  MXU: {} weight tiles ({}x{}), {} rows streamed per tile{}, {} passes over {} MXUs",
            s.tiles,
            d,
            d,
            s.rows,
            if s.swapped {
                " (operands swapped: LHS stationary)"
            } else {
                ""
            },
            s.passes,
            s.mxus
        ));
        out.push(format!(
            "       per MXU: stream {:.0} + unhidden weight loads {:.0} + pass overhead {:.0} + fill/drain {:.0} = {:.0} cycles x {} precision pass(es) = {}",
            s.stream_cycles,
            s.weight_load_cycles,
            s.pass_overhead_cycles,
            s.fill_drain_cycles,
            s.cycles / f64::from(s.precision_passes.max(1)),
            s.precision_passes,
            us(s.cycles / clock)
        ));
    }
    out.push(format!(
        "  VPU: {}   XLU: {}   registers loaded/stored: {:.0} = {}",
        us(e.vpu_s),
        us(e.xlu_s),
        e.vregs,
        us(e.vreg_s)
    ));
    out.push(format!(
        "  DMA: {} in + {} out (tiled layout){}, {} tiles of {} = {}",
        bytes(e.bytes_in),
        bytes(e.bytes_out),
        if e.bytes_from_cmem > 0.0 {
            format!(" ({} from CMEM)", bytes(e.bytes_from_cmem))
        } else {
            String::new()
        },
        e.dma_tiles,
        bytes(e.dma_bytes_per_tile),
        us(e.dma_s)
    ));
    let compute = e.mxu_s.max(e.vpu_s).max(e.xlu_s).max(e.vreg_s);
    let unit = if compute == e.mxu_s && e.mxu_s > 0.0 {
        "MXU"
    } else if compute == e.xlu_s && e.xlu_s > 0.0 {
        "XLU"
    } else if compute == e.vreg_s && e.vreg_s > e.vpu_s {
        "load/store"
    } else {
        "VPU"
    };
    let dma = e.dma_s;
    let share = 1.0 - 1.0 / e.tiles_per_core.max(1.0);
    out.push(format!(
        "  pipeline: {:.1} tiles per core, (T-1)/T = {share:.3} of max(compute {} [{unit}], DMA {}) = {} -> {}-bound",
        e.tiles_per_core,
        us(compute),
        us(dma),
        us(compute.max(dma) * share),
        if dma >= compute { "DMA" } else { unit }
    ));
    out.push(format!(
        "  + prologue (first tile in) {} + epilogue (last tile's compute and store; in a program only its compute) {}",
        us(e.prologue_s),
        us(e.epilogue_s)
    ));
    out.push(format!(
        "  + fixed: in a program {} -> {};  as a lone kernel {} -> {}",
        us(e.fixed_s),
        us(e.time_s),
        us(lone.overhead_s),
        us(lone.time_s)
    ));
    for n in e.notes.iter().chain(e.custom_call.iter()) {
        out.push(format!("  note: {n}"));
    }
    Some(out)
}

fn us(s: f64) -> String {
    format!("{:.3} us", s * 1e6)
}

fn bytes(b: f64) -> String {
    if b >= 1048576.0 {
        format!("{:.2} MiB", b / 1048576.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

/// Bytes a kernel reads of operand `k` when it only gathers or slices it
/// (the sliced result's size), or `None` when it reads all of it.
/// For a dynamic-update-slice, bare or as a fusion's root over a fusion
/// parameter nothing else reads: the operand index of the buffer it updates
/// in place and the tiled bytes of the update it writes.
pub(crate) fn in_place_update(m: &Module, id: InstrId, lanes: u64) -> Option<(usize, f64)> {
    let ins = m.instr(id);
    let update_bytes = |dus: &tpusim_hlo::Instruction| {
        dus.operands
            .get(1)
            .map(|&u| shape_tiled_bytes(&m.instr(u).shape, lanes))
    };
    match ins.opcode {
        Opcode::DynamicUpdateSlice => Some((0, update_bytes(ins)?)),
        Opcode::Fusion => {
            let comp = m.comp(*ins.called_computations().first()?);
            let root = m.instr(comp.root);
            if root.opcode != Opcode::DynamicUpdateSlice {
                return None;
            }
            let &buffer = root.operands.first()?;
            let b = m.instr(buffer);
            let read_elsewhere = comp
                .instrs
                .iter()
                .any(|&j| j != comp.root && m.instr(j).operands.contains(&buffer));
            if b.opcode != Opcode::Parameter || read_elsewhere {
                return None;
            }
            Some((
                usize::try_from(b.parameter_number?).ok()?,
                update_bytes(root)?,
            ))
        }
        _ => None,
    }
}

fn sliced_read(m: &Module, id: InstrId, k: usize) -> Option<f64> {
    let lanes = 128;
    let ins = m.instr(id);
    let slicing = |op: Opcode| matches!(op, Opcode::Gather | Opcode::DynamicSlice | Opcode::Slice);
    if slicing(ins.opcode) {
        return (k == 0).then(|| shape_tiled_bytes(&ins.shape, lanes));
    }
    if ins.opcode != Opcode::Fusion {
        return None;
    }
    // Inside a fusion: the parameter for operand k, if every use slices it,
    // directly or after element-wise conversions (XLA computes a fused
    // element-wise producer only at the elements its consumer reads).
    let comp = m.comp(*ins.called_computations().first()?);
    let param = *comp.params.get(k)?;
    let param_bytes = m.instr(param).shape.element_type()?.byte_size() as f64;
    let users = tpusim_hlo::passes::distinct_users(m, *ins.called_computations().first()?);
    let mut total = 0.0;
    let mut sliced_any = false;
    let mut frontier = vec![param];
    while let Some(v) = frontier.pop() {
        let scale = param_bytes / m.instr(v).shape.element_type()?.byte_size().max(1) as f64;
        for &j in users.get(&v).map_or(&[][..], Vec::as_slice) {
            let u = m.instr(j);
            if slicing(u.opcode) && u.operands.first() == Some(&v) {
                total += shape_tiled_bytes(&u.shape, lanes) * scale;
                sliced_any = true;
            } else if is_unary_elementwise(m, j) && j != comp.root {
                frontier.push(j);
            } else {
                return None;
            }
        }
    }
    sliced_any.then_some(total)
}

/// A one-operand element-wise op that keeps its operand's dimensions
/// (convert, negate, exp...).
fn is_unary_elementwise(m: &Module, j: InstrId) -> bool {
    let u = m.instr(j);
    u.operands.len() == 1
        && u.opcode.category() == tpusim_hlo::OpCategory::Unary
        && m.instr(u.operands[0]).shape.dims() == u.shape.dims()
}

/// A dot whose rows or output columns are a single vector.
pub fn is_matrix_vector(mm: &MatmulInfo) -> bool {
    mm.m == 1 || mm.n == 1
}

/// The instructions a kernel runs: the op itself, and the body of a fusion.
fn kernel_instrs(m: &Module, id: InstrId) -> impl Iterator<Item = InstrId> + '_ {
    let ins = m.instr(id);
    let bodies = if ins.opcode == Opcode::Fusion {
        ins.called_computations()
    } else {
        Vec::new()
    };
    std::iter::once(id).chain(
        bodies
            .into_iter()
            .flat_map(move |c| m.comp(c).instrs.iter().copied()),
    )
}

fn contains(m: &Module, id: InstrId, op: Opcode) -> bool {
    kernel_instrs(m, id).any(|j| m.instr(j).opcode == op)
}

/// The number of results of a reduction over its operand's minor-most
/// (lane) dimension in the kernel `id` (the op or its fused computation).
fn lane_reduction_results(m: &Module, id: InstrId) -> Option<u64> {
    kernel_instrs(m, id).find_map(|j| {
        let r = m.instr(j);
        if r.opcode != Opcode::Reduce {
            return None;
        }
        let input = m.instr(*r.operands.first()?).shape.as_array()?;
        let minor = input
            .layout
            .as_ref()
            .and_then(|l| l.minor_to_major.first().copied())
            .unwrap_or(input.dims.len() as i64 - 1);
        let dims = r.attr_ints("dimensions")?;
        if !dims.contains(&minor) || input.dims.get(usize::try_from(minor).ok()?)? <= &1 {
            return None;
        }
        let out = *r.shape.leaves().first()?;
        Some(out.dims.iter().map(|&d| d.max(1) as u64).product())
    })
}

fn is_transpose(m: &Module, id: InstrId) -> bool {
    contains(m, id, Opcode::Transpose)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiled_bytes_pads_minor_dims_and_drops_unit_dims() {
        // bf16 (1, 8, 18): 18 lanes pad to 128; or the other order:
        // 18 -> 24 rows, 8 -> 128 lanes; the first is cheaper.
        assert_eq!(
            tiled_bytes(PrimitiveType::Bf16, &[1, 8, 18], 128),
            8.0 * 128.0 * 2.0
        );
        // f32 (1, 1, 300) is a vector: 300 -> 384 lanes.
        assert_eq!(
            tiled_bytes(PrimitiveType::F32, &[1, 1, 300], 128),
            384.0 * 4.0
        );
        assert_eq!(tiled_bytes(PrimitiveType::F32, &[4, 0, 3], 128), 0.0);
    }
}
