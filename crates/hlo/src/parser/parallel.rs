//! Parallel parsing of large modules.
//!
//! Computations depend on each other only through references by name, so a
//! large module is cut at computation boundaries (a line that starts with `}`),
//! the pieces are parsed on all cores with references to other pieces left
//! pending, and the results are stitched together in text order.
//!
//! Anything unusual — a parse error, a cut that is not a real boundary, a
//! forward reference, a duplicate name — makes it give up and the sequential
//! parser runs instead, so results and error messages are always exactly the
//! sequential parser's.

use super::{PResult, Parser, SourceMap};
use crate::attr::AttrValue;
use crate::ir::{CompId, Computation, InstrId, Instruction, Module};
use crate::lexer::Tok;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// Below this size a sequential parse takes a few milliseconds: threads do not pay.
const MIN_PARALLEL_BYTES: usize = 1 << 20;
/// Pieces per thread, so that uneven pieces still balance.
const PIECES_PER_THREAD: usize = 4;
/// Ids at or above this are pending references to another piece's computation.
pub(super) const PENDING_BASE: u32 = 1 << 31;

/// What one piece of the text parsed into, with piece-local ids.
struct Piece<'a> {
    comps: Vec<Computation>,
    instrs: Vec<Instruction>,
    spans: SourceMap,
    comp_names: FxHashMap<String, CompId>,
    /// Names of computations referenced but not defined in this piece, and the
    /// (piece-local) computation that refers to each.
    pending: Vec<(&'a str, CompId)>,
    entry: Option<CompId>,
}

/// Parses `text` in parallel if it is a large single module; `None` means
/// "use the sequential parser".
pub(super) fn try_parse(text: &str) -> Option<Vec<(Module, SourceMap)>> {
    let threads = rayon::current_num_threads();
    if text.len() < MIN_PARALLEL_BYTES || threads < 2 {
        return None;
    }
    let mut head = Parser::new(text);
    let prelude = head.prelude().ok()?;
    if matches!(head.tok.tok, Tok::Eof) {
        return None;
    }
    let body_start = head.tok.start;
    // Only single-module texts: a second header would belong to another module.
    if text[body_start..].contains("\nHloModule") {
        return None;
    }
    let cuts = cut_points(text, body_start, threads * PIECES_PER_THREAD);
    let pieces: Vec<Piece> = cuts
        .par_windows(2)
        .map(|w| parse_piece(text, w[0], w[1]))
        .collect::<Option<Vec<_>>>()?;
    let (comps, instrs, spans, entry) = stitch(pieces)?;
    head.comps = comps;
    head.instrs = instrs;
    head.spans = spans;
    let module = head.finish(prelude, entry).ok()?;
    Some(vec![(module, std::mem::take(&mut head.spans))])
}

/// Byte offsets that split `text[start..]` into about `pieces` parts, each cut
/// just after a line that begins with `}` (the end of a printed computation).
fn cut_points(text: &str, start: usize, pieces: usize) -> Vec<usize> {
    let target = (text.len() - start) / pieces.max(1) + 1;
    let mut cuts = vec![start];
    let mut from = start + target;
    while from < text.len() {
        let Some(i) = text[from..].find("\n}") else {
            break;
        };
        let brace = from + i + 1;
        let end = text[brace..]
            .find('\n')
            .map_or(text.len(), |j| brace + j + 1);
        if end >= text.len() {
            break;
        }
        cuts.push(end);
        from = end + target;
    }
    cuts.push(text.len());
    cuts
}

fn parse_piece(text: &str, start: usize, end: usize) -> Option<Piece<'_>> {
    let mut p = Parser::new_range(text, start, end);
    p.deferred = true;
    let mut entry = None;
    while !matches!(p.tok.tok, Tok::Eof) {
        let (id, is_entry) = computation_or_give_up(&mut p)?;
        if is_entry {
            if entry.is_some() {
                return None;
            }
            entry = Some(id);
        }
        // Anonymous instructions are numbered module-wide: only the sequential parser can.
        if !p.anon_counts.is_empty() {
            return None;
        }
    }
    Some(Piece {
        comps: p.comps,
        instrs: p.instrs,
        spans: p.spans,
        comp_names: p.comp_names,
        pending: p.pending,
        entry,
    })
}

fn computation_or_give_up(p: &mut Parser<'_>) -> Option<(CompId, bool)> {
    let r: PResult<(CompId, bool)> = p.computation();
    r.ok()
}

type Stitched = (
    Vec<Computation>,
    Vec<Instruction>,
    SourceMap,
    Option<CompId>,
);

/// Concatenates the pieces, turning piece-local and pending ids into module ids.
fn stitch(mut pieces: Vec<Piece<'_>>) -> Option<Stitched> {
    // Global names first, so that pending references can be resolved.
    let mut names: FxHashMap<String, CompId> = FxHashMap::default();
    let mut bases = Vec::with_capacity(pieces.len());
    let (mut comp_base, mut instr_base) = (0u32, 0u32);
    for piece in &pieces {
        for (name, &id) in &piece.comp_names {
            if names
                .insert(name.clone(), CompId(id.0 + comp_base))
                .is_some()
            {
                return None;
            }
        }
        bases.push((comp_base, instr_base));
        comp_base += piece.comps.len() as u32;
        instr_base += piece.instrs.len() as u32;
    }
    // Rewrite ids in place, piece by piece in parallel.
    let entries: Vec<Option<CompId>> = pieces
        .par_iter_mut()
        .zip(&bases)
        .map(|(piece, &(comp_base, instr_base))| {
            // A pending reference must name a computation defined earlier in the text.
            let resolved: Vec<CompId> = piece
                .pending
                .iter()
                .map(|&(name, from)| {
                    names
                        .get(name)
                        .copied()
                        .filter(|c| c.0 < from.0 + comp_base)
                })
                .collect::<Option<_>>()?;
            let map = IdMap {
                comp_base,
                instr_base,
                resolved: &resolved,
            };
            piece.comps.iter_mut().for_each(|c| map.computation(c));
            piece.instrs.iter_mut().for_each(|i| map.instruction(i));
            Some(piece.entry.map(|e| map.comp(e)))
        })
        .collect::<Option<_>>()?;
    let mut entry = None;
    for e in entries.into_iter().flatten() {
        if entry.replace(e).is_some() {
            return None;
        }
    }
    let mut comps = Vec::with_capacity(comp_base as usize);
    let mut instrs = Vec::with_capacity(instr_base as usize);
    let mut spans = SourceMap::default();
    for piece in &mut pieces {
        comps.append(&mut piece.comps);
        instrs.append(&mut piece.instrs);
        spans.instr_offsets.append(&mut piece.spans.instr_offsets);
        spans.comp_offsets.append(&mut piece.spans.comp_offsets);
    }
    Some((comps, instrs, spans, entry))
}

/// Rewrites one piece's ids into module ids.
struct IdMap<'r> {
    comp_base: u32,
    instr_base: u32,
    resolved: &'r [CompId],
}

impl IdMap<'_> {
    fn comp(&self, c: CompId) -> CompId {
        if c.0 >= PENDING_BASE {
            self.resolved[(c.0 - PENDING_BASE) as usize]
        } else {
            CompId(c.0 + self.comp_base)
        }
    }

    fn instr(&self, i: InstrId) -> InstrId {
        InstrId(i.0 + self.instr_base)
    }

    fn computation(&self, c: &mut Computation) {
        c.instrs.iter_mut().for_each(|i| *i = self.instr(*i));
        c.params.iter_mut().for_each(|i| *i = self.instr(*i));
        c.root = self.instr(c.root);
    }

    fn instruction(&self, i: &mut Instruction) {
        i.parent = self.comp(i.parent);
        i.operands.iter_mut().for_each(|o| *o = self.instr(*o));
        for a in &mut i.attrs {
            match &mut a.value {
                AttrValue::Comp(c) => *c = self.comp(*c),
                AttrValue::Comps(cs) => cs.iter_mut().for_each(|c| *c = self.comp(*c)),
                AttrValue::Instrs(is) => is.iter_mut().for_each(|x| *x = self.instr(*x)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequential(text: &str) -> (Module, SourceMap) {
        let mut p = Parser::new(text);
        let m = p.module().unwrap();
        (m, p.spans)
    }

    #[test]
    fn parallel_parse_equals_sequential_on_large_modules() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/corpus/xla");
        let mut large = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            if text.len() < MIN_PARALLEL_BYTES {
                continue;
            }
            large += 1;
            let parallel = try_parse(&text).expect("large corpus modules parse in parallel");
            assert_eq!(parallel.len(), 1);
            let (m, spans) = sequential(&text);
            assert!(parallel[0].0 == m, "{}: modules differ", path.display());
            assert_eq!(parallel[0].1, spans, "{}", path.display());
        }
        assert!(large >= 2, "the corpus should have large modules");
    }

    #[test]
    fn gives_up_on_forward_references() {
        // `late` is used before it is defined: the sequential parser must report it.
        let filler = format!(
            "f {{\n  ROOT p = f32[] parameter(0)\n}}\n{}",
            "\n".repeat(MIN_PARALLEL_BYTES)
        );
        let text = format!("HloModule m\n\n{filler}ENTRY e {{\n  a = f32[] parameter(0)\n  ROOT c = f32[] call(a), to_apply=late\n}}\n\nlate {{\n  ROOT p = f32[] parameter(0)\n}}\n");
        assert!(try_parse(&text).is_none());
    }

    #[test]
    fn cuts_only_after_closing_lines() {
        let text = "HloModule m\n\na {\n  x = f32[] parameter(0)\n}\n\nb {\n  y = f32[] parameter(0)\n}\n\nENTRY c {\n  z = f32[] parameter(0)\n}\n";
        let start = text.find("a {").unwrap();
        let cuts = cut_points(text, start, 3);
        assert_eq!(cuts.first(), Some(&start));
        assert_eq!(cuts.last(), Some(&text.len()));
        for &c in &cuts[1..cuts.len() - 1] {
            assert_eq!(&text[c - 2..c], "}\n");
        }
    }
}
