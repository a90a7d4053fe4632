//! XLA's TransposeFolding: a transpose that only feeds dots is folded into
//! their dimension numbers, so the MXU reads the operand as it lies instead
//! of a kernel writing a transposed copy to HBM.

use crate::Changed;
use tpusim_hlo::{AttrValue, InstrId, Module, Opcode};

/// Dimension-number attributes of a dot, by name.
type DimNumbers = Vec<(&'static str, Vec<i64>)>;

/// Folds every transpose whose users are all dots that can read its operand
/// directly (the dot's free dimensions keep their order, so its result is
/// unchanged).
pub fn fold_transposes_into_dots(m: &mut Module) -> Changed {
    let mut folded = 0;
    for c in crate::util::control_computations(m) {
        let users = crate::util::users(m, c);
        for t in m.comp(c).instrs.clone() {
            if m.instr(t).opcode != Opcode::Transpose || m.comp(c).root == t {
                continue;
            }
            let Some(dots) = users.get(&t) else {
                continue;
            };
            let plans: Option<Vec<(InstrId, DimNumbers)>> =
                dots.iter().map(|&d| Some((d, refold(m, d, t)?))).collect();
            let Some(plans) = plans else {
                continue;
            };
            let x = m.instr(t).operands[0];
            for (d, attrs) in plans {
                let dot = &mut m.instrs[d.index()];
                for o in &mut dot.operands {
                    if *o == t {
                        *o = x;
                    }
                }
                for (name, dims) in attrs {
                    if let Some(a) = dot.attrs.iter_mut().find(|a| a.name == name) {
                        a.value = AttrValue::Ints(dims);
                    }
                }
            }
            folded += 1;
        }
    }
    tpusim_hlo::passes::remove_dead_code(m);
    Changed::count(folded, |n| {
        format!("{n} transposes folded into the dots reading them")
    })
}

/// The dimension-number attributes of dot `d` after reading transpose `t`'s
/// operand in place of `t` (on whichever sides it is read), or `None` when
/// `d` is not a dot or folding would reorder its free dimensions.
fn refold(m: &Module, d: InstrId, t: InstrId) -> Option<DimNumbers> {
    let dot = m.instr(d);
    if dot.opcode != Opcode::Dot || dot.operands.len() != 2 {
        return None;
    }
    let perm = m.instr(t).attr_ints("dimensions")?;
    let mut out = Vec::new();
    for (side, (contracting, batch)) in [
        ("lhs_contracting_dims", "lhs_batch_dims"),
        ("rhs_contracting_dims", "rhs_batch_dims"),
    ]
    .into_iter()
    .enumerate()
    {
        if dot.operands[side] != t {
            continue;
        }
        let cd = dot.attr_ints(contracting).unwrap_or(&[]);
        let bd = dot.attr_ints(batch).unwrap_or(&[]);
        let map = |dims: &[i64]| -> Option<Vec<i64>> {
            dims.iter()
                .map(|&j| perm.get(usize::try_from(j).ok()?).copied())
                .collect()
        };
        let free: Vec<i64> = (0..perm.len() as i64)
            .filter(|j| !cd.contains(j) && !bd.contains(j))
            .collect();
        let mapped_free = map(&free)?;
        if mapped_free.windows(2).any(|w| w[0] > w[1]) {
            return None;
        }
        out.push((contracting, map(cd)?));
        if dot.attr(batch).is_some() {
            out.push((batch, map(bd)?));
        }
    }
    Some(out)
}
