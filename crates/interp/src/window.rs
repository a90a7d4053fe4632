//! `select-and-scatter` (HLO_SEMANTICS §6.3): max-pool gradients.

use crate::eval::Interp;
use crate::gather::unravel;
use crate::lift::{call_scalar, internal, lift, scalar_at, truth};
use crate::scatter::combine;
use crate::value::{elem_count, strides, Array, Data};
use crate::InterpError;
use tpusim_hlo::attr::{AttrValue, WindowDim};
use tpusim_hlo::{CompId, InstrId, Opcode};

/// A select computation that is one `compare(p0, p1)`: direction and compare type.
fn simple_select(interp: &Interp, s: CompId) -> Option<(String, Option<String>)> {
    let comp = interp.m.comp(s);
    let root = interp.m.instr(comp.root);
    let ps = &comp.params;
    (ps.len() == 2 && root.opcode == Opcode::Compare && root.operands[..] == ps[..]).then(|| {
        (
            root.attr_ident("direction").unwrap_or("").to_string(),
            root.attr_ident("type").map(str::to_string),
        )
    })
}

/// The direction of a select computation's compare.
#[derive(Clone, Copy)]
enum Direction {
    Ge,
    Gt,
    Le,
    Lt,
}

impl Direction {
    fn parse(dir: &str) -> Option<Direction> {
        Some(match dir {
            "GE" => Direction::Ge,
            "GT" => Direction::Gt,
            "LE" => Direction::Le,
            "LT" => Direction::Lt,
            _ => return None,
        })
    }

    #[inline(always)]
    fn holds(self, o: Option<std::cmp::Ordering>) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self {
            Direction::Ge => matches!(o, Some(Greater | Equal)),
            Direction::Gt => o == Some(Greater),
            Direction::Le => matches!(o, Some(Less | Equal)),
            Direction::Lt => o == Some(Less),
        }
    }
}

/// [`select_each`] for a select computation that is one compare of the
/// operand's elements: one monomorphic loop per element type, in parallel
/// across source positions. `None` for element types compared otherwise.
fn select_by_compare(
    g: &Geometry,
    wpos: &[Vec<usize>],
    nq: usize,
    x: &Data,
    dir: Direction,
    total: bool,
) -> Option<Vec<usize>> {
    Some(match x {
        Data::F32(v) if total => {
            select_par(g, wpos, nq, |a, b| dir.holds(Some(v[a].total_cmp(&v[b]))))
        }
        Data::F32(v) => select_par(g, wpos, nq, |a, b| dir.holds(v[a].partial_cmp(&v[b]))),
        Data::F64(v) if total => {
            select_par(g, wpos, nq, |a, b| dir.holds(Some(v[a].total_cmp(&v[b]))))
        }
        Data::F64(v) => select_par(g, wpos, nq, |a, b| dir.holds(v[a].partial_cmp(&v[b]))),
        Data::I64(v) => select_par(g, wpos, nq, |a, b| dir.holds(Some(v[a].cmp(&v[b])))),
        Data::U64(v) => select_par(g, wpos, nq, |a, b| dir.holds(Some(v[a].cmp(&v[b])))),
        _ => return None,
    })
}

/// Source positions per parallel task of [`select_par`].
const SELECT_CHUNK: usize = 4096;

/// [`select_each`] with an infallible `keep`, in parallel chunks of source positions.
///
/// Source positions are taken a run at a time (see [`crate::ops::trailing_run`]):
/// each window element's operand index is worked out once per run, and the
/// run's positions compare consecutive operand elements. Every position still
/// sees the window elements in row-major order.
fn select_par(
    g: &Geometry,
    wpos: &[Vec<usize>],
    nq: usize,
    keep: impl Fn(usize, usize) -> bool + Sync,
) -> Vec<usize> {
    use rayon::prelude::*;
    let (lead, run) = crate::ops::trailing_run(g.window, g.dims, g.source);
    let run = run.max(1);
    let chunk = run * (SELECT_CHUNK / run).max(1);
    let mut chosen = vec![NONE; nq];
    chosen
        .par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(c, part)| {
            let mut qc = unravel(c * chunk, g.source);
            for sel in part.chunks_mut(run) {
                for wc in wpos {
                    let Some(first) = g.element(&qc, wc) else {
                        continue;
                    };
                    for (j, s) in sel.iter_mut().enumerate() {
                        let lin = first + j;
                        if *s == NONE || !keep(*s, lin) {
                            *s = lin;
                        }
                    }
                }
                // The next run's source coordinates, in row-major order.
                for k in (0..lead).rev() {
                    qc[k] += 1;
                    if qc[k] < g.source[k] {
                        break;
                    }
                    qc[k] = 0;
                }
            }
        });
    chosen
}

/// No element selected (a window entirely in padding).
const NONE: usize = usize::MAX;

/// How source positions map to operand windows.
struct Geometry<'a> {
    window: &'a [WindowDim],
    dims: &'a [usize],
    strides: crate::value::DimList,
    source: &'a [usize],
}

impl Geometry<'_> {
    /// Operand linear index of window offset `wc` for source coordinates `qc`, if inside.
    fn element(&self, qc: &[usize], wc: &[usize]) -> Option<usize> {
        let mut lin = 0usize;
        for (k, d) in self.window.iter().enumerate() {
            let b = qc[k] as i64 * d.stride + wc[k] as i64 * d.window_dilation - d.padding_low;
            if b < 0 || b >= self.dims[k] as i64 {
                return None;
            }
            lin += b as usize * self.strides[k];
        }
        Some(lin)
    }
}

/// The selected operand index per source position, window element by window element,
/// with `keep(current, candidate)` the select computation.
fn select_each(
    g: &Geometry,
    wpos: &[Vec<usize>],
    nq: usize,
    keep: impl FnMut(usize, usize) -> Result<bool, InterpError>,
) -> Result<Vec<usize>, InterpError> {
    let mut chosen = vec![NONE; nq];
    select_run(g, wpos, vec![0usize; g.source.len()], &mut chosen, keep)?;
    Ok(chosen)
}

/// Fills `chosen` for consecutive source positions from coordinates `qc` on.
fn select_run<E>(
    g: &Geometry,
    wpos: &[Vec<usize>],
    mut qc: Vec<usize>,
    chosen: &mut [usize],
    mut keep: impl FnMut(usize, usize) -> Result<bool, E>,
) -> Result<(), E> {
    for sel in chosen.iter_mut() {
        for wc in wpos {
            let Some(lin) = g.element(&qc, wc) else {
                continue;
            };
            if *sel == NONE || !keep(*sel, lin)? {
                *sel = lin;
            }
        }
        // Next source position in row-major order.
        for k in (0..qc.len()).rev() {
            qc[k] += 1;
            if qc[k] < g.source[k] {
                break;
            }
            qc[k] = 0;
        }
    }
    Ok(())
}

/// [`select_each`] with the select computation lifted over all source positions at
/// once per window element; None when it is not elementwise.
fn select_lifted(
    interp: &Interp,
    s: CompId,
    operand: &Array,
    g: &Geometry,
    wpos: &[Vec<usize>],
    nq: usize,
) -> Result<Option<Vec<usize>>, InterpError> {
    let root = interp.m.comp(s).root;
    let coords: Vec<Vec<usize>> = (0..nq).map(|q| unravel(q, g.source)).collect();
    let mut chosen = vec![NONE; nq];
    for wc in wpos {
        let (mut at, mut cur, mut cand) = (Vec::new(), Vec::new(), Vec::new());
        for (q, qc) in coords.iter().enumerate() {
            let Some(lin) = g.element(qc, wc) else {
                continue;
            };
            if chosen[q] == NONE {
                chosen[q] = lin;
            } else {
                at.push(q);
                cur.push(chosen[q]);
                cand.push(lin);
            }
        }
        if at.is_empty() {
            continue;
        }
        let m = at.len();
        let a = Array::new(operand.ty, vec![m], operand.data.take(&cur));
        let b = Array::new(operand.ty, vec![m], operand.data.take(&cand));
        let Some(Array {
            data: Data::Pred(keep),
            ..
        }) = lift(interp, s, root, &[Some(&a), Some(&b)], &[m])?
        else {
            return Ok(None);
        };
        for t in 0..m {
            if !keep[t] {
                chosen[at[t]] = cand[t];
            }
        }
    }
    Ok(Some(chosen))
}

/// `select-and-scatter(operand, source, init), window, select=s, scatter=t`.
pub(crate) fn select_and_scatter(
    interp: &Interp,
    id: InstrId,
    operand: &Array,
    source: &Array,
    init: &Array,
) -> Result<Array, InterpError> {
    let ins = interp.m.instr(id);
    let Some(AttrValue::Window(w)) = ins.attr("window") else {
        return Err(internal("select-and-scatter without window"));
    };
    let (Some(s), Some(t)) = (ins.attr_comp("select"), ins.attr_comp("scatter")) else {
        return Err(internal("select-and-scatter without select/scatter"));
    };
    let rank = operand.dims.len();
    if w.dims.len() != rank || source.dims.len() != rank {
        return Err(internal("window rank does not match the operand"));
    }
    if w.dims
        .iter()
        .any(|d| d.base_dilation != 1 || d.reversal || d.stride < 1 || d.window_dilation < 1)
    {
        return Err(InterpError::Unsupported(
            "select-and-scatter with dilation or window reversal".into(),
        ));
    }
    if init.len() != 1 {
        return Err(internal("select-and-scatter init must be a scalar"));
    }
    let wsizes: Vec<usize> = w.dims.iter().map(|d| d.size.max(0) as usize).collect();
    let wpos: Vec<Vec<usize>> = (0..elem_count(&wsizes))
        .map(|i| unravel(i, &wsizes))
        .collect();
    let nq = elem_count(&source.dims);
    let simple = simple_select(interp, s);
    let geom = Geometry {
        window: &w.dims,
        dims: &operand.dims,
        strides: strides(&operand.dims),
        source: &source.dims,
    };
    let by_compare = simple.as_ref().and_then(|(dir, ty)| {
        let total = ty.as_deref() == Some("TOTALORDER");
        select_by_compare(
            &geom,
            &wpos,
            nq,
            &operand.data,
            Direction::parse(dir)?,
            total,
        )
    });
    let chosen = match by_compare {
        Some(chosen) => chosen,
        None => match select_lifted(interp, s, operand, &geom, &wpos, nq)? {
            Some(chosen) => chosen,
            None => select_each(&geom, &wpos, nq, |cur, lin| {
                let args = [scalar_at(operand, cur), scalar_at(operand, lin)];
                let r = call_scalar(interp, s, &args)?;
                truth(
                    r.first()
                        .ok_or_else(|| internal("select returned nothing"))?,
                )
            })?,
        },
    };
    let pairs: Vec<(usize, usize)> = chosen
        .into_iter()
        .enumerate()
        .filter(|&(_, sel)| sel != NONE)
        .map(|(q, sel)| (sel, q))
        .collect();
    let out = Array::new(
        init.ty,
        operand.dims.clone(),
        init.data.splat(0, operand.len()),
    );
    let mut outs = combine(interp, t, true, vec![out], &[source], &pairs)?;
    Ok(outs.remove(0))
}
