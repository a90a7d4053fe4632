//! `gather` (HLO_SEMANTICS §7.1) and the index-space bookkeeping it shares with scatter.

use crate::lift::internal;
use crate::value::{elem_count, strides, Array};
use crate::InterpError;
use tpusim_hlo::Instruction;

/// Reads a `{...}` attribute as dimension numbers (absent means empty).
pub(crate) fn dims_attr(ins: &Instruction, name: &str) -> Vec<usize> {
    ins.attr_ints(name)
        .unwrap_or(&[])
        .iter()
        .map(|&d| d.max(0) as usize)
        .collect()
}

/// Row-major linear offsets `Σ i_k * coef_k` over the index space `sizes`.
pub(crate) fn offsets(sizes: &[usize], coef: &[usize]) -> Vec<usize> {
    let coef: Vec<isize> = coef.iter().map(|&c| c as isize).collect();
    crate::ops::affine(sizes, &coef, 0)
}

/// The start-index operand of a gather or scatter, viewed per batch position.
pub(crate) struct StartIndices {
    /// Values, signed (unsigned ones saturate at i64::MAX, which clamps or skips alike).
    values: Vec<i64>,
    /// Sizes of the index dims other than `index_vector_dim`, in order.
    pub batch_sizes: Vec<usize>,
    /// Linear offset in `values` of each batch position (row-major over `batch_sizes`).
    pub batch_base: Vec<usize>,
    /// Stride of `index_vector_dim` in `values`.
    vec_stride: usize,
    /// Length of the index vector.
    pub vec_len: usize,
    /// Position within the batch coordinates of each indices dim (None for the vector dim).
    batch_pos: Vec<Option<usize>>,
}

impl StartIndices {
    pub fn new(indices: &Array, index_vector_dim: usize) -> Result<StartIndices, InterpError> {
        let mut dims = indices.dims.clone();
        if index_vector_dim > dims.len() {
            return Err(internal("index_vector_dim out of range"));
        }
        if index_vector_dim == dims.len() {
            dims.push(1);
        }
        let st = strides(&dims);
        let keep: Vec<usize> = (0..dims.len()).filter(|&d| d != index_vector_dim).collect();
        let batch_sizes: Vec<usize> = keep.iter().map(|&d| dims[d]).collect();
        let coef: Vec<usize> = keep.iter().map(|&d| st[d]).collect();
        let batch_pos = (0..dims.len())
            .map(|d| (d != index_vector_dim).then(|| d - (d > index_vector_dim) as usize))
            .collect();
        Ok(StartIndices {
            values: indices.to_index_i64s()?,
            batch_base: offsets(&batch_sizes, &coef),
            batch_sizes,
            vec_stride: st[index_vector_dim],
            vec_len: dims[index_vector_dim],
            batch_pos,
        })
    }

    /// Component `k` of the index vector at batch position `g`.
    pub fn component(&self, g: usize, k: usize) -> i64 {
        self.values[self.batch_base[g] + k * self.vec_stride]
    }

    /// The full operand start `Sin` at batch position `g` (before clamping), with
    /// batching dims taken from the batch coordinates.
    pub fn full_start(
        &self,
        g: usize,
        rank: usize,
        index_map: &[usize],
        operand_batching: &[usize],
        indices_batching: &[usize],
    ) -> Vec<i64> {
        let mut s = vec![0i64; rank];
        for (k, &d) in index_map.iter().enumerate() {
            s[d] = self.component(g, k);
        }
        if !operand_batching.is_empty() {
            let coords = unravel(g, &self.batch_sizes);
            for (&od, &id) in operand_batching.iter().zip(indices_batching) {
                if let Some(Some(p)) = self.batch_pos.get(id) {
                    s[od] = coords[*p] as i64;
                }
            }
        }
        s
    }

    /// Checks the dimension-number lists against the operand rank.
    pub fn check(
        &self,
        rank: usize,
        index_map: &[usize],
        operand_batching: &[usize],
        indices_batching: &[usize],
    ) -> Result<(), InterpError> {
        if index_map.len() != self.vec_len {
            return Err(internal("index vector length does not match the index map"));
        }
        let bad_op = index_map.iter().chain(operand_batching).any(|&d| d >= rank);
        let bad_idx = operand_batching.len() != indices_batching.len()
            || indices_batching
                .iter()
                .any(|&d| !matches!(self.batch_pos.get(d), Some(Some(_))));
        if bad_op || bad_idx {
            return Err(internal("gather/scatter dimension numbers out of range"));
        }
        Ok(())
    }
}

/// Row-major coordinates of linear index `i` in `sizes`.
pub(crate) fn unravel(mut i: usize, sizes: &[usize]) -> Vec<usize> {
    let mut c = vec![0usize; sizes.len()];
    for d in (0..sizes.len()).rev() {
        if sizes[d] > 0 {
            c[d] = i % sizes[d];
            i /= sizes[d];
        }
    }
    c
}

/// `gather(operand, start_indices)` into an array of `out_dims`.
pub(crate) fn gather(
    ins: &Instruction,
    operand: &Array,
    indices: &Array,
    out_dims: Vec<usize>,
) -> Result<Array, InterpError> {
    let offset_dims = dims_attr(ins, "offset_dims");
    let collapsed = dims_attr(ins, "collapsed_slice_dims");
    let index_map = dims_attr(ins, "start_index_map");
    let op_batching = dims_attr(ins, "operand_batching_dims");
    let idx_batching = dims_attr(ins, "start_indices_batching_dims");
    let slice_sizes = dims_attr(ins, "slice_sizes");
    let ivd = ins
        .attr_int("index_vector_dim")
        .ok_or_else(|| internal("gather without index_vector_dim"))?
        .max(0) as usize;
    let rank = operand.dims.len();
    let si = StartIndices::new(indices, ivd)?;
    si.check(rank, &index_map, &op_batching, &idx_batching)?;
    if slice_sizes.len() != rank || slice_sizes.iter().zip(&operand.dims).any(|(s, d)| s > d) {
        return Err(internal("gather slice_sizes do not fit the operand"));
    }
    // Operand dims that the slice keeps, in order; they fill offset_dims in order.
    let kept: Vec<usize> = (0..rank)
        .filter(|d| !collapsed.contains(d) && !op_batching.contains(d))
        .collect();
    let out_rank = out_dims.len();
    let batch_out: Vec<usize> = (0..out_rank).filter(|d| !offset_dims.contains(d)).collect();
    if kept.len() != offset_dims.len()
        || offset_dims.iter().any(|&d| d >= out_rank)
        || batch_out.len() != si.batch_sizes.len()
        || batch_out
            .iter()
            .zip(&si.batch_sizes)
            .any(|(&o, &b)| out_dims[o] != b)
        || kept
            .iter()
            .zip(&offset_dims)
            .any(|(&k, &o)| out_dims[o] != slice_sizes[k])
    {
        return Err(internal(
            "gather output shape does not match its dimension numbers",
        ));
    }
    // Shape inference lets a collapsed (or batching) dim have slice size 0
    // ("bound 1 or 0"), which leaves nothing to read for a non-empty result.
    let empty_slice = (0..rank).any(|d| slice_sizes[d] == 0);
    if empty_slice && elem_count(&out_dims) > 0 {
        return Err(InterpError::Unsupported(
            "gather of an empty slice (a collapsed dim of slice size 0) into a non-empty result"
                .to_string(),
        ));
    }
    let ost = strides(&operand.dims);
    let outst = strides(&out_dims);
    let slice_shape: Vec<usize> = kept.iter().map(|&k| slice_sizes[k]).collect();
    let in_slice = offsets(
        &slice_shape,
        &kept.iter().map(|&k| ost[k]).collect::<Vec<_>>(),
    );
    let out_slice = offsets(
        &slice_shape,
        &offset_dims.iter().map(|&o| outst[o]).collect::<Vec<_>>(),
    );
    let out_batch = offsets(
        &si.batch_sizes,
        &batch_out.iter().map(|&o| outst[o]).collect::<Vec<_>>(),
    );
    let mut src = vec![0usize; elem_count(&out_dims)];
    for (g, &ob) in out_batch.iter().enumerate() {
        let start = si.full_start(g, rank, &index_map, &op_batching, &idx_batching);
        let base: usize = (0..rank)
            .map(|d| {
                let hi = (operand.dims[d] - slice_sizes[d]) as i64;
                start[d].clamp(0, hi) as usize * ost[d]
            })
            .sum();
        for (&i, &o) in in_slice.iter().zip(&out_slice) {
            src[ob + o] = base + i;
        }
    }
    Ok(Array::new(operand.ty, out_dims, operand.data.take(&src)))
}
