//! Pallas TPU kernels (`tpu_custom_call`) that ship no `cost_estimate`,
//! recognized from their operand and result shapes: JAX's flash attention
//! backward, splash attention (forward, dq, dkv, fused backward), paged
//! attention and ragged paged attention. Each gives the work it does
//! (flops, transcendentals) and, where it reads only part of an operand (a
//! paged KV cache), the bytes it reads; the TensorCore model times that.
//! Nothing here runs a kernel or reads its Mosaic body.
//!
//! Conventions follow JAX's own forward flash-attention estimate: 2 flops
//! per multiply-add, every (query, key) pair of a computed block counted,
//! one exp per score.

use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{InstrId, Module, Opcode, PrimitiveType, Shape};

/// A recognized kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Recognized {
    /// What it is, e.g. `splash attention forward`.
    pub kernel: String,
    pub transcendentals: f64,
    /// Its matmuls as the MXU runs them, `[batch, m, k, n]` each (flops:
    /// `2·batch·m·k·n` summed).
    pub matmuls: Vec<[u64; 4]>,
    /// Bytes it reads, when that is less than its operands (the pages of a
    /// paged KV cache its sequences use, not the whole pool).
    pub bytes_read: Option<f64>,
    /// How the figures follow from the shapes, and what was assumed.
    pub detail: String,
}

impl Recognized {
    /// Its flops: `2·batch·m·k·n` over its matmuls.
    pub fn flops(&self) -> f64 {
        self.matmuls.iter().map(matmul_flops).sum()
    }
}

/// The flops of one `[batch, m, k, n]` matmul: `2·batch·m·k·n`.
pub fn matmul_flops(&[b, m, k, n]: &[u64; 4]) -> f64 {
    2.0 * b as f64 * m as f64 * k as f64 * n as f64
}

fn u(x: i64) -> u64 {
    x.max(0) as u64
}

/// The kernel `id` is, if it is one of the kinds above.
pub fn recognize(m: &Module, id: InstrId) -> Option<Recognized> {
    let ins = m.instr(id);
    if ins.opcode != Opcode::CustomCall {
        return None;
    }
    flash_attention_backward(m, id)
        .or_else(|| splash_attention(m, id))
        .or_else(|| paged_attention(m, id))
        .or_else(|| ragged_paged_attention(m, id))
}

fn dims(m: &Module, id: InstrId) -> Vec<i64> {
    m.instr(id).shape.dims().to_vec()
}

fn operand_dims(m: &Module, id: InstrId) -> Vec<Vec<i64>> {
    m.instr(id).operands.iter().map(|&o| dims(m, o)).collect()
}

fn result_shapes(m: &Module, id: InstrId) -> Vec<&Shape> {
    let shape = &m.instr(id).shape;
    match shape.tuple_elements() {
        Some(t) => t.iter().collect(),
        None => vec![shape],
    }
}

fn is_float(s: &Shape) -> bool {
    s.element_type().is_some_and(PrimitiveType::is_float)
}

fn is_int(s: &Shape) -> bool {
    s.element_type().is_some_and(PrimitiveType::is_integral)
}

fn elem_bytes(s: &Shape) -> f64 {
    s.element_type().map_or(2, |t| t.byte_size().max(1)) as f64
}

fn product(d: &[i64]) -> f64 {
    d.iter().map(|&x| x.max(0) as f64).product()
}

/// JAX's Pallas flash attention ships a `cost_estimate` for its forward
/// kernel only; its backward kernels read `q, k, v` (`[B, H, S, D]`, k and
/// v alike) first, plus the forward's statistics and `do`, and return
/// `dq` (`q`'s shape) or `(dk, dv)` (`k`'s shape each). Recomputing the
/// scores `q·kᵀ` and `do·vᵀ` and then producing `dq = ds·k` takes three
/// S×S matmuls; `dv = pᵀ·do` and `dk = dsᵀ·q` make the dkv kernel four.
pub fn flash_attention_backward(m: &Module, id: InstrId) -> Option<Recognized> {
    let ops = operand_dims(m, id);
    let [q, k, v, ..] = ops.as_slice() else {
        return None;
    };
    if ops.len() < 4 {
        return None;
    }
    let rank4 = |d: &[i64]| d.len() == 4;
    if !(rank4(q) && rank4(k) && k == v && q[0] == k[0] && q[3] == k[3] && q[1] % k[1] == 0) {
        return None;
    }
    let results: Vec<Vec<i64>> = result_shapes(m, id)
        .iter()
        .map(|s| s.dims().to_vec())
        .collect();
    let (name, count) = match results.as_slice() {
        [dq] if dq == q => ("dq", 3),
        [dk, dv] if dk == k && dv == k => ("dkv", 4),
        _ => return None,
    };
    let scores = q[0] as f64 * q[1] as f64 * q[2] as f64 * k[2] as f64;
    let matmuls = vec![[u(q[0].saturating_mul(q[1])), u(q[2]), u(q[3]), u(k[2])]; count];
    Some(Recognized {
        kernel: format!("flash attention backward ({name})"),
        transcendentals: scores,
        matmuls,
        bytes_read: None,
        detail: format!(
            "q {q:?}, k {k:?}: {count} S×S matmuls over every (query, key) pair, one exp per \
             score"
        ),
    })
}

/// Splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`):
/// operands `[data_next, block_mask, (mask_next,)] q, k, v, ...` with q
/// `[H, Sq, D]` and k, v `[Hkv, Sk, D]` (or `[Sk, D]`, multi-query); the
/// int8/int32 `block_mask` `[Hm, Sq/bq, Sk/bkv]` says which (query block,
/// key block) pairs are computed (0: none of it). The forward returns
/// `q`'s shape; the backward kernels read the forward's statistics (f32
/// `[H, *, Sq]`) and return dq (three block matmuls), dk and dv (four), or
/// all three (five, the fused kernel).
pub fn splash_attention(m: &Module, id: InstrId) -> Option<Recognized> {
    let ins = m.instr(id);
    let shapes: Vec<&Shape> = ins.operands.iter().map(|&o| &m.instr(o).shape).collect();
    // q, k, v: the first three consecutive floating operands.
    let first = shapes.iter().position(|s| is_float(s))?;
    let [q, k, v] = [first, first + 1, first + 2].map(|i| shapes.get(i).map(|s| s.dims()));
    let (q, k, v) = (q?, k?, v?);
    if !(shapes[first + 1..=first + 2].iter().all(|s| is_float(s))) {
        return None;
    }
    let (heads, sq, d) = match q {
        [h, s, d] => (*h, *s, *d),
        _ => return None,
    };
    let (kv_heads, sk) = match k {
        [h, s, dk] if *dk == d => (*h, *s),
        [s, dk] if *dk == d => (1, *s),
        _ => return None,
    };
    if k != v || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 {
        return None;
    }
    // The mask-info arrays before q: rank 3, integer, all alike.
    let infos: Vec<usize> = (0..first)
        .filter(|&i| is_int(shapes[i]) && shapes[i].dims().len() == 3)
        .collect();
    let &mask_at = match infos.as_slice() {
        [only] => only,
        [_, second, ..] => second,
        _ => return None,
    };
    let grid = shapes[mask_at].dims();
    let (mask_heads, q_blocks, kv_blocks) = (grid[0], grid[1], grid[2]);
    if q_blocks <= 0 || kv_blocks <= 0 {
        return None;
    }
    // The dkv kernel walks the transposed mask: (kv blocks, q blocks).
    let (bq, bkv) = if sq % q_blocks == 0 && sk % kv_blocks == 0 {
        (sq / q_blocks, sk / kv_blocks)
    } else if sq % kv_blocks == 0 && sk % q_blocks == 0 {
        (sq / kv_blocks, sk / q_blocks)
    } else {
        return None;
    };
    let backward = shapes[first + 3..]
        .iter()
        .any(|s| s.element_type() == Some(PrimitiveType::F32) && s.dims().last() == Some(&sq));
    // Results in q's type and q's or k's shape: out, dq, dk, dv (not the
    // f32 statistics, which may share the shape).
    let q_type = shapes[first].element_type();
    let q_like = result_shapes(m, id)
        .iter()
        .filter(|s| s.element_type() == q_type && (s.dims() == q || s.dims() == k))
        .count();
    let (phase, count) = match (backward, q_like) {
        (false, 1) => ("forward", 2),
        (true, 1) => ("backward dq", 3),
        (true, 2) => ("backward dkv", 4),
        (true, 3) => ("fused backward", 5),
        _ => return None,
    };
    let blocks_per_head = q_blocks as f64 * kv_blocks as f64;
    let mask_op = ins.operands[mask_at];
    let (active, how) = match count_nonzero(m, mask_op) {
        Some(n) => {
            // A mask shared by all heads (Hm = 1) counts once per head.
            let per_head = n as f64 / mask_heads.max(1) as f64;
            (
                per_head,
                format!(
                    "{per_head:.0} of {blocks_per_head:.0} blocks per head computed (block mask \
                     {})",
                    m.instr(mask_op).name
                ),
            )
        }
        None => (
            blocks_per_head,
            format!(
                "block mask {} is not a constant: all {blocks_per_head:.0} blocks per head \
                 assumed computed",
                m.instr(mask_op).name
            ),
        ),
    };
    let pairs = heads as f64 * active * bq as f64 * bkv as f64;
    let computed = (heads as f64 * active).round() as u64;
    let matmuls = vec![[computed, u(bq), u(d), u(bkv)]; count];
    Some(Recognized {
        kernel: format!("splash attention {phase}"),
        transcendentals: pairs,
        matmuls,
        bytes_read: None,
        detail: format!(
            "q {q:?}, k {k:?}, blocks {bq}x{bkv}: {how}; {count} block matmuls per computed \
             block, one exp per score"
        ),
    })
}

/// Non-zero elements of a constant integer array, or `None` when `id` is not
/// one.
fn count_nonzero(m: &Module, id: InstrId) -> Option<u64> {
    let ins = m.instr(id);
    if ins.opcode != Opcode::Constant {
        return None;
    }
    match ins.literal.as_ref()? {
        Literal::Array(LiteralData::Int(v)) => Some(v.iter().filter(|&&x| x != 0).count() as u64),
        _ => None,
    }
}

/// A paged kernel's two matmuls (`q·kᵀ`, `p·v`): per (sequence, KV head)
/// group, `rows` query rows against `pages × page` keys of depth `d`.
fn attend(groups: i64, rows: u64, d: i64, pages: i64, page: i64) -> Vec<[u64; 4]> {
    vec![[u(groups), rows, u(d), u(pages.saturating_mul(page))]; 2]
}

/// Bytes of every operand but those at `skip` (read whole, untiled).
fn bytes_except(shapes: &[&Shape], skip: &[usize]) -> f64 {
    shapes
        .iter()
        .enumerate()
        .filter(|(i, _)| !skip.contains(i))
        .map(|(_, s)| product(s.dims()) * elem_bytes(s))
        .sum()
}

/// JAX's paged attention (decode): operands `lengths [B], page_indices
/// [B·pps], (scalars,) q [B, H, g, D], k_pages, v_pages [Hkv, P, page, D]`.
/// Each sequence attends to its `lengths[b]` keys, runtime values: every
/// sequence is assumed to fill its `pps` pages. It reads those pages, not
/// the whole pool.
pub fn paged_attention(m: &Module, id: InstrId) -> Option<Recognized> {
    let ins = m.instr(id);
    let shapes: Vec<&Shape> = ins.operands.iter().map(|&o| &m.instr(o).shape).collect();
    let first = shapes.iter().position(|s| is_float(s))?;
    let (lengths, indices) = match shapes[..first]
        .iter()
        .filter(|s| is_int(s) && s.dims().len() == 1)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [l, i, ..] => (l.dims()[0], i.dims()[0]),
        _ => return None,
    };
    let q = shapes.get(first)?;
    let (kp, vp) = (shapes.get(first + 1)?, shapes.get(first + 2)?);
    let (qd, kd) = (q.dims(), kp.dims());
    if qd.len() != 4 || kd.len() != 4 || kp.dims() != vp.dims() || !is_float(kp) {
        return None;
    }
    let (batch, d) = (qd[0], qd[3]);
    let (kv_heads, pool, page) = (kd[0], kd[1], kd[2]);
    if batch <= 0 || lengths != batch || kd[3] != d || indices % batch != 0 || page <= 0 {
        return None;
    }
    let pages_per_seq = indices / batch;
    let q_heads = qd[1].saturating_mul(qd[2]);
    let keys = pages_per_seq as f64 * page as f64;
    let pairs = batch as f64 * q_heads as f64 * keys;
    let kv_read = 2.0 * batch as f64 * kv_heads as f64 * keys * d as f64 * elem_bytes(kp);
    if kv_heads <= 0 || q_heads % kv_heads != 0 {
        return None;
    }
    // Per sequence and KV head: its query heads' rows against its keys.
    let rows = u(q_heads / kv_heads);
    let matmuls = attend(batch.saturating_mul(kv_heads), rows, d, pages_per_seq, page);
    let small = bytes_except(&shapes, &[first + 1, first + 2]);
    Some(Recognized {
        kernel: "paged attention".into(),
        transcendentals: pairs,
        matmuls,
        bytes_read: Some(kv_read + small),
        detail: format!(
            "{batch} sequences x {q_heads} query heads over {kv_heads} KV heads, {pages_per_seq} \
             pages of {page} per sequence (of a {pool}-page pool): lengths are runtime values, \
             every sequence assumed to fill its pages; reads those pages of K and V"
        ),
    })
}

/// JAX's ragged paged attention (mixed prefill and decode): operands
/// `kv_lens [S], page_indices [S, pps], cu_q_lens [S+1], ..., q [T, H, D],
/// kv_pages [P, page, 2·Hkv, D]` (K and V heads interleaved). Query and KV
/// lengths are runtime values: every query token is assumed to attend to a
/// full `pps` pages, and every sequence's pages are read once.
pub fn ragged_paged_attention(m: &Module, id: InstrId) -> Option<Recognized> {
    let ins = m.instr(id);
    let shapes: Vec<&Shape> = ins.operands.iter().map(|&o| &m.instr(o).shape).collect();
    let first = shapes.iter().position(|s| is_float(s))?;
    let indices = shapes[..first]
        .iter()
        .find(|s| is_int(s) && s.dims().len() == 2)?
        .dims();
    let (seqs, pages_per_seq) = (indices[0], indices[1]);
    let q = shapes.get(first)?.dims();
    let kv = shapes.get(first + 1)?;
    let kd = kv.dims();
    if q.len() != 3 || kd.len() != 4 || kd[3] != q[2] || kd[2] % 2 != 0 || kd[2] == 0 {
        return None;
    }
    let (tokens, q_heads, d) = (q[0], q[1], q[2]);
    let (pool, page, kv_heads) = (kd[0], kd[1], kd[2] / 2);
    if seqs <= 0 || q_heads % kv_heads != 0 {
        return None;
    }
    let keys = pages_per_seq as f64 * page as f64;
    let pairs = tokens as f64 * q_heads as f64 * keys;
    let kv_read = seqs as f64 * keys * 2.0 * kv_heads as f64 * d as f64 * elem_bytes(kv);
    // Per sequence and KV head: its tokens' query heads against its keys
    // (tokens spread evenly over the sequences).
    let rows = u(tokens.saturating_mul(q_heads / kv_heads)).div_ceil(u(seqs));
    let matmuls = attend(seqs.saturating_mul(kv_heads), rows, d, pages_per_seq, page);
    let small = bytes_except(&shapes, &[first + 1]);
    Some(Recognized {
        kernel: "ragged paged attention".into(),
        transcendentals: pairs,
        matmuls,
        bytes_read: Some(kv_read + small),
        detail: format!(
            "{tokens} query tokens x {q_heads} heads over {kv_heads} KV heads, {seqs} sequences \
             of {pages_per_seq} pages of {page} (of a {pool}-page pool): lengths are runtime \
             values, every token assumed to attend to all its sequence's pages (an upper bound \
             for prefill); each sequence's pages read once"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_custom_call(text: &str) -> Option<Recognized> {
        let m = tpusim_hlo::parse_module(text).unwrap();
        let id = m
            .instrs
            .iter()
            .position(|i| i.opcode == Opcode::CustomCall)
            .unwrap();
        recognize(&m, InstrId(id as u32))
    }

    fn splash(mask: &str, q: &str, k: &str) -> String {
        format!(
            r#"HloModule s
ENTRY e {{
  n = s8[{mask}] parameter(0)
  b = s8[{mask}] parameter(1)
  q = bf16[{q}] parameter(2)
  k = bf16[{k}] parameter(3)
  v = bf16[{k}] parameter(4)
  ROOT o = bf16[{q}] custom-call(n, b, q, k, v), custom_call_target="tpu_custom_call"
}}"#
        )
    }

    #[test]
    fn a_splash_kernel_with_an_unknown_mask_counts_every_block() {
        let r = first_custom_call(&splash("1,4,4", "2,512,128", "2,512,128")).unwrap();
        assert_eq!(r.kernel, "splash attention forward");
        // 2 heads x 16 blocks of 128x128, two matmuls of depth 128.
        assert_eq!(r.flops(), 2.0 * 2.0 * (2.0 * 16.0 * 128.0 * 128.0) * 128.0);
        assert!(r.detail.contains("not a constant"), "{}", r.detail);
    }

    #[test]
    fn degenerate_shapes_are_not_recognized_and_never_panic() {
        for (mask, q, k) in [
            ("1,0,4", "2,512,128", "2,512,128"),
            ("1,4,4", "0,512,128", "2,512,128"),
            ("1,4,4", "2,512,128", "0,512,128"),
            ("1,3,3", "2,512,128", "2,512,128"),
            ("1,4,4", "3,512,128", "2,512,128"),
            ("1,4,4", "2,512,128", "2,512,64"),
        ] {
            assert_eq!(
                first_custom_call(&splash(mask, q, k)),
                None,
                "{mask} {q} {k}"
            );
        }
        let paged = |b: &str, idx: &str| {
            format!(
                r#"HloModule p
ENTRY e {{
  l = s32[{b}] parameter(0)
  i = s32[{idx}] parameter(1)
  q = f32[{b},32,1,128] parameter(2)
  k = bf16[8,64,16,128] parameter(3)
  v = bf16[8,64,16,128] parameter(4)
  ROOT o = f32[{b},32,1,128] custom-call(l, i, q, k, v), custom_call_target="tpu_custom_call"
}}"#
            )
        };
        assert!(first_custom_call(&paged("4", "32")).is_some());
        assert_eq!(first_custom_call(&paged("0", "0")), None);
        assert_eq!(first_custom_call(&paged("4", "30")), None);
    }
}
