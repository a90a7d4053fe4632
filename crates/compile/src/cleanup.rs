//! Housekeeping passes: dead-code elimination, arena compaction, and the
//! while-loop trip-count annotation XLA attaches before fusion.

use crate::Changed;
use tpusim_hlo::analysis::{while_trip_count, TripCount};
use tpusim_hlo::{Attr, AttrValue, InstrId, Module, Opcode};

/// Removes unused instructions without side effects from control computations.
pub fn dead_code_elimination(m: &mut Module) -> Changed {
    let removed = tpusim_hlo::passes::remove_dead_code(m);
    Changed::count(removed, |n| format!("{n} dead instructions removed"))
}

/// Drops arena instructions no computation lists (left by rewrites) and
/// renumbers ids, so consumers that scan the arena see only the program.
pub fn compact(m: &mut Module) {
    tpusim_hlo::passes::compact_instructions(m);
}

/// Records each loop's trip count in its backend_config as XLA's
/// WhileLoopTripCountAnnotator does, so it survives fusing the condition.
pub fn annotate_trip_counts(m: &mut Module) -> Changed {
    let loops: Vec<InstrId> = (0..m.instrs.len() as u32)
        .map(InstrId)
        .filter(|&i| {
            m.instr(i).opcode == Opcode::While && m.instr(i).attr("backend_config").is_none()
        })
        .collect();
    let mut annotated = 0;
    for w in loops {
        if let TripCount::Inferred(n) = while_trip_count(m, w) {
            let attrs = &mut m.instrs[w.index()].attrs;
            attrs.push(Attr {
                name: "backend_config".into(),
                value: AttrValue::Str(format!("{{\"known_trip_count\":{{\"n\":\"{n}\"}}}}")),
            });
            crate::util::sort_attrs(attrs);
            annotated += 1;
        }
    }
    Changed::count(annotated, |n| format!("{n} loop trip counts recorded"))
}
