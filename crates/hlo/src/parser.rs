//! Hand-written recursive-descent parser for HLO text (HLO_GRAMMAR §1–§9).
//!
//! One token of lookahead; attribute values are parsed by type, decided by the
//! attribute's name. Recursion is bounded by [`MAX_DEPTH`] so no input can
//! overflow the stack, and nothing is allocated in proportion to a declared shape.

use crate::attr::*;
use crate::error::ParseError;
use crate::ir::*;
use crate::lexer::{Lexer, Tok, Token};
use crate::literal::{round_to_type, Literal, LiteralData};
use crate::opcode::Opcode;
use crate::shape::{ArrayShape, Layout, Shape, COMBINE_DIM, UNBOUNDED_DIM};
use crate::types::{PrimitiveType, TypeKind};
use rustc_hash::{FxHashMap, FxHashSet};

/// Deepest nesting of shapes, literals, operands or attribute values accepted.
pub const MAX_DEPTH: usize = 256;
/// Largest byte size of one array shape accepted (XLA: must fit in int64).
const MAX_SHAPE_BYTES: i128 = i64::MAX as i128;
/// Longest raw attribute blob (backend_config, origin...) accepted.
const MAX_RAW_LEN: usize = 64 << 20;

type PResult<T> = Result<T, ParseError>;

mod attrs;
mod literal;
mod shape;

use attrs::intern_attr_name;
pub use attrs::parse_dim_labels;

/// Where each instruction and computation starts in the source text: a side
/// table indexed by [`InstrId`] / [`CompId`], used to point diagnostics at the text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMap {
    pub instr_offsets: Vec<usize>,
    pub comp_offsets: Vec<usize>,
}

/// Parses text holding exactly one module.
pub fn parse_module(text: &str) -> PResult<Module> {
    let mut mods = parse_modules_with_spans(text)?;
    if mods.len() != 1 {
        return Err(ParseError::new(
            0,
            1,
            format!("expected one module, found {}", mods.len()),
        ));
    }
    Ok(mods.pop().expect("one module").0)
}

/// Parses text holding one or more modules (each after an `HloModule` header;
/// `// -----` separators are comments).
pub fn parse_modules(text: &str) -> PResult<Vec<Module>> {
    Ok(parse_modules_with_spans(text)?
        .into_iter()
        .map(|(m, _)| m)
        .collect())
}

/// Like [`parse_modules`], also returning each module's [`SourceMap`].
pub fn parse_modules_with_spans(text: &str) -> PResult<Vec<(Module, SourceMap)>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if text.len() >= PIPELINE_MIN_BYTES && cores >= 2 {
        // Any failure, even one caused by the pipeline itself, is re-parsed
        // sequentially so that errors are exactly the sequential parser's.
        if let Ok(parsed) = parse_pipelined(text) {
            return Ok(parsed);
        }
    }
    parse_all(&mut Parser::new(text, None))
}

/// Inputs at least this large are lexed on a second thread while they are parsed.
const PIPELINE_MIN_BYTES: usize = 256 << 10;
/// Tokens per message from the lexer thread.
const PIPELINE_CHUNK: usize = 4096;

fn parse_all(p: &mut Parser<'_>) -> PResult<Vec<(Module, SourceMap)>> {
    let mut out = Vec::new();
    loop {
        let m = p.module()?;
        out.push((m, std::mem::take(&mut p.spans)));
        if p.tok.tok == Tok::Eof {
            return Ok(out);
        }
        if p.tok.tok != Tok::Ident("HloModule") {
            return Err(p.err_here("expected 'HloModule' or end of input"));
        }
    }
}

/// Parses with the lexer running on a second thread, one chunk of tokens ahead.
fn parse_pipelined(text: &str) -> PResult<Vec<(Module, SourceMap)>> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Token<'_>>>(64);
        scope.spawn(move || lex_into(text, tx));
        let pipe = Pipe {
            rx,
            buf: Vec::new(),
            next: 0,
            eof: Token {
                tok: Tok::Eof,
                start: text.len(),
                end: text.len(),
            },
        };
        let mut p = Parser::new(text, Some(pipe));
        let parsed = parse_all(&mut p);
        if p.pipe_out_of_step {
            return Err(ParseError::new(0, 1, "token pipeline out of step"));
        }
        parsed
    })
}

/// The lexer thread: sends every token of `text`, in chunks, ending with `Eof`.
fn lex_into<'a>(text: &'a str, tx: std::sync::mpsc::SyncSender<Vec<Token<'a>>>) {
    let mut lex = Lexer::new(text);
    loop {
        let mut chunk = Vec::with_capacity(PIPELINE_CHUNK);
        let mut done = false;
        while chunk.len() < PIPELINE_CHUNK && !done {
            let t = lex.next_token();
            done = t.tok == Tok::Eof;
            chunk.push(t);
        }
        // A closed channel means the parser stopped early (an error): stop too.
        if tx.send(chunk).is_err() || done {
            return;
        }
    }
}

/// The parser's end of the token pipeline.
struct Pipe<'a> {
    rx: std::sync::mpsc::Receiver<Vec<Token<'a>>>,
    buf: Vec<Token<'a>>,
    next: usize,
    eof: Token<'a>,
}

impl<'a> Pipe<'a> {
    fn peek(&mut self) -> Token<'a> {
        if self.next == self.buf.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.buf = chunk;
                    self.next = 0;
                }
                Err(_) => return self.eof,
            }
        }
        self.buf.get(self.next).copied().unwrap_or(self.eof)
    }

    fn next_token(&mut self) -> Token<'a> {
        let t = self.peek();
        self.next += 1;
        t
    }
}

struct Parser<'a> {
    lex: Lexer<'a>,
    tok: Token<'a>,
    depth: usize,
    comps: Vec<Computation>,
    instrs: Vec<Instruction>,
    comp_names: FxHashMap<String, CompId>,
    /// Instruction names of the computation being parsed.
    scope: FxHashMap<&'a str, InstrId>,
    /// How many anonymous instructions of each opcode were named so far (XLA's
    /// uniquifier: `parameter.anon`, then `parameter.anon.1`, ...).
    anon_counts: FxHashMap<&'a str, usize>,
    spans: SourceMap,
    /// Start of the instruction being parsed, for the source map.
    cur_instr_start: usize,
    /// Tokens lexed by another thread (large inputs); `None`: `lex` is used.
    pipe: Option<Pipe<'a>>,
    /// Set when the pipelined tokens disagree with the text (the parse is redone).
    pipe_out_of_step: bool,
    /// Attribute names of the instruction being parsed (duplicate check).
    seen_attrs: FxHashSet<&'a str>,
}

/// The module header and stack-frame section, parsed before the computations.
struct Prelude<'a> {
    name: String,
    config: ModuleConfig,
    stack_frames: Option<StackFrameIndex>,
    /// The `entry_computation_layout=` token, to point errors at.
    layout_at: Token<'a>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, mut pipe: Option<Pipe<'a>>) -> Parser<'a> {
        let mut lex = Lexer::new(text);
        let tok = match &mut pipe {
            Some(p) => p.next_token(),
            None => lex.next_token(),
        };
        Parser {
            lex,
            tok,
            depth: 0,
            comps: Vec::new(),
            // About one instruction per 80 bytes of real HLO; avoids regrowing the arena.
            instrs: Vec::with_capacity(text.len() / 80),
            comp_names: FxHashMap::default(),
            scope: FxHashMap::default(),
            anon_counts: FxHashMap::default(),
            spans: SourceMap::default(),
            cur_instr_start: 0,
            seen_attrs: FxHashSet::default(),
            pipe,
            pipe_out_of_step: false,
        }
    }

    /// Adds an instruction to the arena, recording where the current token starts.
    fn push_instr(&mut self, ins: Instruction) {
        self.instrs.push(ins);
        self.spans.instr_offsets.push(self.cur_instr_start);
    }

    // ----- token helpers -------------------------------------------------------

    fn bump(&mut self) -> Token<'a> {
        let next = match &mut self.pipe {
            Some(p) => p.next_token(),
            None => self.lex.next_token(),
        };
        std::mem::replace(&mut self.tok, next)
    }

    /// After a raw scan left `lex` just past some text, makes the token after
    /// that text current (skipping what the pipeline lexed inside it).
    fn resync(&mut self) {
        let next = self.lex.next_token();
        if let Some(p) = &mut self.pipe {
            while p.peek().start < next.start && p.peek().tok != Tok::Eof {
                p.next_token();
            }
            let piped = p.next_token();
            if (piped.start, piped.end) != (next.start, next.end) {
                self.pipe_out_of_step = true;
            }
        }
        self.tok = next;
    }

    fn err_at(&self, t: &Token, msg: impl Into<String>) -> ParseError {
        ParseError::new(t.start, t.end.saturating_sub(t.start).max(1), msg)
    }

    fn err_here(&self, msg: impl Into<String>) -> ParseError {
        if let Tok::Error(e) = self.tok.tok {
            return self.lex_error(e);
        }
        self.err_at(&self.tok, msg)
    }

    /// The error for a token the lexer rejected, naming the offending character.
    fn lex_error(&self, e: &str) -> ParseError {
        let src = self.lex.source();
        let ch = src.get(self.tok.start..).and_then(|t| t.chars().next());
        match (e, ch) {
            ("unexpected character", Some(c)) => {
                let e = self.err_at(
                    &self.tok,
                    format!("unexpected character '{}'", c.escape_debug()),
                );
                if c.is_ascii() {
                    e
                } else {
                    e.with_hint("HLO text uses only ASCII outside strings and comments")
                }
            }
            _ => self.err_at(&self.tok, e),
        }
    }

    fn expected(&self, what: &str) -> ParseError {
        if let Tok::Error(e) = self.tok.tok {
            return self.lex_error(e);
        }
        self.err_here(format!(
            "expected {what}, found {}",
            self.tok.tok.describe()
        ))
    }

    fn eat(&mut self, t: Tok<'static>) -> bool {
        if same_token(&self.tok.tok, &t) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: Tok<'static>, what: &str) -> PResult<Token<'a>> {
        if same_token(&self.tok.tok, &t) {
            Ok(self.bump())
        } else {
            Err(self.expected(what))
        }
    }

    fn is_ident(&self, s: &str) -> bool {
        matches!(self.tok.tok, Tok::Ident(x) if x == s)
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self
                .err_here(format!("nesting is deeper than {MAX_DEPTH} levels"))
                .with_hint("real HLO never nests this deep; the input is probably corrupt"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Like [`Self::enter`], for a construct whose recursion takes several times
    /// the stack of a tuple shape (a nested instruction, a physical shape inside
    /// a layout): it counts as `weight` levels, so that the deepest accepted
    /// input of any kind fits in a 2 MiB thread stack even in a debug build.
    fn enter_weighted(&mut self, weight: usize) -> PResult<()> {
        self.depth += weight - 1;
        self.enter()
    }

    fn leave_weighted(&mut self, weight: usize) {
        self.depth -= weight;
    }

    fn int(&mut self) -> PResult<i64> {
        match self.tok.tok {
            Tok::Int(v) => {
                self.bump();
                Ok(v)
            }
            Tok::UInt64(v) => Err(self.err_here(format!("integer {v} is out of range"))),
            _ => Err(self.expected("an integer")),
        }
    }

    fn bool_value(&mut self) -> PResult<bool> {
        match self.tok.tok {
            Tok::Ident("true") => {
                self.bump();
                Ok(true)
            }
            Tok::Ident("false") => {
                self.bump();
                Ok(false)
            }
            _ => Err(self.expected("'true' or 'false'")),
        }
    }

    fn string(&mut self) -> PResult<String> {
        match self.tok.tok {
            Tok::Str(s) => {
                let t = self.bump();
                s.value()
                    .map(|v| v.into_owned())
                    .map_err(|e| self.err_at(&t, e))
            }
            _ => Err(self.expected("a string")),
        }
    }

    /// A name: `%x`, or a bare identifier.
    fn name(&mut self) -> PResult<&'a str> {
        match self.tok.tok {
            Tok::Name(n) | Tok::Ident(n) => {
                self.bump();
                Ok(n)
            }
            _ => Err(self.expected("a name")),
        }
    }

    /// `{i, j, ...}`
    fn int_list_braced(&mut self) -> PResult<Vec<i64>> {
        self.expect(Tok::LBrace, "'{'")?;
        let v = self.int_list_until(Tok::RBrace)?;
        self.expect(Tok::RBrace, "'}'")?;
        Ok(v)
    }

    /// Comma-separated ints up to (not including) `close`.
    fn int_list_until(&mut self, close: Tok<'static>) -> PResult<Vec<i64>> {
        let mut v = Vec::new();
        if same_token(&self.tok.tok, &close) {
            return Ok(v);
        }
        loop {
            v.push(self.int()?);
            if !self.eat(Tok::Comma) {
                return Ok(v);
            }
        }
    }

    /// `[i, j, ...]`
    fn int_list_bracketed(&mut self) -> PResult<Vec<i64>> {
        self.expect(Tok::LBracket, "'['")?;
        let v = self.int_list_until(Tok::RBracket)?;
        self.expect(Tok::RBracket, "']'")?;
        Ok(v)
    }

    /// Captures a raw value verbatim: a balanced `{..}`/`[..]`/`(..)`, or one token.
    fn raw_value(&mut self) -> PResult<String> {
        match self.tok.tok {
            Tok::LBrace | Tok::LBracket | Tok::LParen => {
                self.lex.reset_to(self.tok.start);
                let start = self.tok.start;
                let text = self
                    .lex
                    .scan_balanced(MAX_RAW_LEN)
                    .map_err(|e| ParseError::new(start, 1, e))?;
                self.resync();
                Ok(text.to_string())
            }
            Tok::Eof | Tok::Comma | Tok::RBrace | Tok::RParen => Err(self.expected("a value")),
            Tok::Error(_) => Err(self.expected("a value")),
            _ => {
                let t = self.bump();
                Ok(self.lex.source()[t.start..t.end].to_string())
            }
        }
    }

    // ----- module --------------------------------------------------------------

    fn push_comp_offset(&mut self, offset: usize) {
        self.spans.comp_offsets.push(offset);
    }

    fn module(&mut self) -> PResult<Module> {
        let prelude = self.prelude()?;
        let mut entry = None;
        while !matches!(self.tok.tok, Tok::Eof) && !self.is_ident("HloModule") {
            let comp_start = self.tok;
            let (id, is_entry) = self.computation()?;
            if is_entry {
                if entry.is_some() {
                    return Err(self
                        .err_at(&comp_start, "more than one ENTRY computation")
                        .with_hint("a module has exactly one ENTRY computation"));
                }
                entry = Some(id);
            }
        }
        self.finish(prelude, entry)
    }

    /// The `HloModule` header and the stack-frame section.
    fn prelude(&mut self) -> PResult<Prelude<'a>> {
        self.spans = SourceMap::default();
        self.comps.clear();
        self.instrs.clear();
        self.comp_names.clear();
        let mut name = String::new();
        let mut config = ModuleConfig::default();
        // The `entry_computation_layout=` token, to point errors at.
        let mut layout_at = self.tok;
        if self.is_ident("HloModule") {
            self.bump();
            if self.is_ident("ENTRY") || self.is_ident("ROOT") {
                return Err(self.expected("a module name after 'HloModule'"));
            }
            name = self.name()?.to_string();
            let mut seen = FxHashSet::default();
            while self.eat(Tok::Comma) {
                if self.tok.tok == Tok::AttrName("entry_computation_layout") {
                    layout_at = self.tok;
                }
                self.module_attr(&mut config, &mut seen)?;
            }
        }
        let stack_frames = if self.is_ident("FileNames") {
            Some(self.stack_frame_index()?)
        } else {
            None
        };
        Ok(Prelude {
            name,
            config,
            stack_frames,
            layout_at,
        })
    }

    /// Checks the whole module and builds it from the parsed computations.
    fn finish(&mut self, prelude: Prelude<'a>, entry: Option<CompId>) -> PResult<Module> {
        let Prelude {
            mut name,
            config,
            stack_frames,
            layout_at,
        } = prelude;
        let Some(entry) = entry.or_else(|| self.last_visible_comp()) else {
            return Err(self
                .err_here("the module has no computations")
                .with_hint("expected a computation like 'ENTRY main { ... }'"));
        };
        self.comps[entry.index()].is_entry = true;
        if name.is_empty() {
            // XLA names a module read without a header after its entry computation.
            name = format!("module_{}", self.comps[entry.index()].name);
        }
        if let Some((params, result)) = &config.entry_layout {
            let c = &self.comps[entry.index()];
            if params.len() != c.params.len() {
                return Err(self.err_at(
                    &layout_at,
                    format!(
                    "entry_computation_layout has {} parameters but the entry computation has {}",
                    params.len(),
                    c.params.len()
                ),
                ));
            }
            let root_shape = &self.instrs[c.root.index()].shape;
            if !result.compatible(root_shape) {
                return Err(self.err_at(
                    &layout_at,
                    format!(
                        "entry_computation_layout result {} does not match the entry ROOT shape {}",
                        result.without_layouts(),
                        root_shape.without_layouts()
                    ),
                ));
            }
        }
        Ok(Module {
            name,
            config,
            stack_frames,
            comps: std::mem::take(&mut self.comps),
            instrs: std::mem::take(&mut self.instrs),
            entry,
        })
    }

    fn last_visible_comp(&self) -> Option<CompId> {
        (0..self.comps.len())
            .rev()
            .find(|&i| !self.comps[i].is_async_sugar)
            .map(|i| CompId(i as u32))
    }

    fn module_attr(&mut self, c: &mut ModuleConfig, seen: &mut FxHashSet<&'a str>) -> PResult<()> {
        let t = self.bump();
        let Tok::AttrName(name) = t.tok else {
            return Err(self.err_at(
                &t,
                format!("expected a module attribute, found {}", t.tok.describe()),
            ));
        };
        if !seen.insert(name) {
            return Err(self.err_at(&t, format!("duplicate module attribute '{name}'")));
        }
        match name {
            "is_scheduled" => {
                c.is_scheduled = Some(self.bool_value()?);
            }
            "alias_passthrough_params" => {
                c.alias_passthrough_params = Some(self.bool_value()?);
            }
            "replica_count" => {
                c.replica_count = Some(self.positive_int("replica_count")?);
            }
            "num_partitions" => {
                c.num_partitions = Some(self.positive_int("num_partitions")?);
            }
            "entry_computation_layout" => {
                self.expect(Tok::LBrace, "'{'")?;
                self.expect(Tok::LParen, "'('")?;
                let mut params = Vec::new();
                if !self.eat(Tok::RParen) {
                    loop {
                        let mut s = self.shape()?;
                        s.fill_default_layouts();
                        params.push(s);
                        if self.eat(Tok::RParen) {
                            break;
                        }
                        self.expect(Tok::Comma, "',' or ')'")?;
                    }
                }
                self.expect(Tok::Arrow, "'->'")?;
                let mut result = self.shape()?;
                result.fill_default_layouts();
                self.expect(Tok::RBrace, "'}'")?;
                c.entry_layout = Some((params, result));
            }
            "input_output_alias" => {
                c.has_input_output_alias = true;
                self.expect(Tok::LBrace, "'{'")?;
                while !matches!(self.tok.tok, Tok::RBrace) {
                    let out_idx = self.int_list_braced()?;
                    self.expect(Tok::Colon, "':'")?;
                    self.expect(Tok::LParen, "'('")?;
                    let param = self.int()?;
                    self.expect(Tok::Comma, "','")?;
                    let param_idx = self.int_list_braced()?;
                    let kind = if self.eat(Tok::Comma) {
                        match self.bump().tok {
                            Tok::Ident(k @ ("may-alias" | "must-alias")) => Some(k.to_string()),
                            _ => return Err(self.err_here("expected 'may-alias' or 'must-alias'")),
                        }
                    } else {
                        None
                    };
                    self.expect(Tok::RParen, "')'")?;
                    c.input_output_alias.push(IoAlias {
                        output_index: out_idx,
                        parameter: param,
                        parameter_index: param_idx,
                        kind,
                    });
                    if !self.eat(Tok::Comma) {
                        break;
                    }
                }
                self.expect(Tok::RBrace, "'}'")?;
            }
            "buffer_donor" => {
                c.has_buffer_donor = true;
                self.expect(Tok::LBrace, "'{'")?;
                while !matches!(self.tok.tok, Tok::RBrace) {
                    self.expect(Tok::LParen, "'('")?;
                    let param = self.int()?;
                    self.expect(Tok::Comma, "','")?;
                    let idx = self.int_list_braced()?;
                    self.expect(Tok::RParen, "')'")?;
                    c.buffer_donor.push((param, idx));
                    if !self.eat(Tok::Comma) {
                        break;
                    }
                }
                self.expect(Tok::RBrace, "'}'")?;
            }
            "frontend_attributes" => {
                c.frontend_attributes = Some(self.frontend_attrs()?);
            }
            _ => {
                let v = self.raw_value()?;
                c.extra.push((name.to_string(), v));
            }
        }
        Ok(())
    }

    fn positive_int(&mut self, what: &str) -> PResult<i64> {
        let t = self.tok;
        let v = self.int()?;
        if v < 1 {
            return Err(self.err_at(&t, format!("{what} must be at least 1")));
        }
        Ok(v)
    }

    fn stack_frame_index(&mut self) -> PResult<StackFrameIndex> {
        let mut idx = StackFrameIndex::default();
        self.bump(); // FileNames
        while let Tok::Int(_) = self.tok.tok {
            self.bump();
            idx.file_names.push(self.string()?);
        }
        self.expect(Tok::Ident("FunctionNames"), "'FunctionNames'")?;
        while let Tok::Int(_) = self.tok.tok {
            self.bump();
            idx.function_names.push(self.string()?);
        }
        self.expect(Tok::Ident("FileLocations"), "'FileLocations'")?;
        while let Tok::Int(_) = self.tok.tok {
            self.bump();
            let f = self.sub_attrs(&[
                "file_name_id",
                "function_name_id",
                "line",
                "end_line",
                "column",
                "end_column",
            ])?;
            idx.file_locations.push(FileLocation {
                file_name_id: f[0],
                function_name_id: f[1],
                line: f[2],
                end_line: f[3],
                column: f[4],
                end_column: f[5],
            });
        }
        self.expect(Tok::Ident("StackFrames"), "'StackFrames'")?;
        while let Tok::Int(_) = self.tok.tok {
            self.bump();
            let f = self.sub_attrs(&["file_location_id", "parent_frame_id"])?;
            idx.stack_frames.push(StackFrame {
                file_location_id: f[0],
                parent_frame_id: f[1],
            });
        }
        Ok(idx)
    }

    /// `{a=1 b=2}` with exactly the given integer fields (in any order).
    fn sub_attrs(&mut self, fields: &[&str]) -> PResult<Vec<i64>> {
        self.expect(Tok::LBrace, "'{'")?;
        let mut vals = vec![None; fields.len()];
        while !matches!(self.tok.tok, Tok::RBrace) {
            let t = self.bump();
            let Tok::AttrName(n) = t.tok else {
                return Err(self.err_at(&t, "expected 'field='"));
            };
            let Some(i) = fields.iter().position(|f| *f == n) else {
                return Err(self
                    .err_at(&t, format!("unknown field '{n}'"))
                    .with_hint(format!("expected one of: {}", fields.join(", "))));
            };
            vals[i] = Some(self.int()?);
            self.eat(Tok::Comma);
        }
        let close = self.expect(Tok::RBrace, "'}'")?;
        vals.iter()
            .zip(fields)
            .map(|(v, f)| v.ok_or_else(|| self.err_at(&close, format!("missing field '{f}'"))))
            .collect()
    }

    // ----- computations --------------------------------------------------------

    fn computation(&mut self) -> PResult<(CompId, bool)> {
        let is_entry = self.eat(Tok::Ident("ENTRY"));
        let name_tok = self.tok;
        let name = match self.tok.tok {
            Tok::Name(_) | Tok::Ident(_) => self.name()?,
            _ => return Err(self.expected("a computation name")),
        };
        if self.comp_names.contains_key(name) {
            return Err(self.err_at(&name_tok, format!("computation '{name}' is defined twice")));
        }
        let declared_result = if matches!(self.tok.tok, Tok::LParen) {
            Some(self.program_shape()?)
        } else {
            None
        };
        let open = self.expect(Tok::LBrace, "'{' to open the computation body")?;
        let id = CompId(self.comps.len() as u32);
        self.push_comp_offset(name_tok.start);
        self.comps.push(Computation {
            name: name.to_string(),
            instrs: Vec::new(),
            root: InstrId(0),
            params: Vec::new(),
            is_entry,
            execution_thread: None,
            is_async_sugar: false,
        });
        self.scope.clear();
        let mut instrs = Vec::new();
        let mut root = None;
        while !matches!(self.tok.tok, Tok::RBrace) {
            if matches!(self.tok.tok, Tok::Eof) {
                let (line, _) = crate::error::line_col(self.lex.source(), open.start);
                return Err(self
                    .err_here("unexpected end of input inside a computation")
                    .with_hint(format!(
                        "add a '}}' to close computation '{name}' (its body opens on line {line})"
                    )));
            }
            let is_root = self.eat(Tok::Ident("ROOT"));
            let start = self.tok;
            let iid = self.instruction(id, &mut instrs)?;
            if is_root {
                if root.is_some() {
                    return Err(self.err_at(&start, "a computation can have only one ROOT"));
                }
                root = Some(iid);
            }
        }
        let close = self.bump();
        let Some(root) = root.or_else(|| instrs.last().copied()) else {
            return Err(self.err_at(&close, format!("computation '{name}' has no instructions")));
        };
        let params = self.collect_params(&instrs, name, &close)?;
        if let Some(declared) = declared_result {
            if !declared.compatible(&self.instrs[root.index()].shape) {
                return Err(self.err_at(
                    &name_tok,
                    format!(
                        "computation '{name}' declares result {} but its ROOT has shape {}",
                        declared,
                        self.instrs[root.index()].shape.without_layouts()
                    ),
                ));
            }
        }
        let mut execution_thread = None;
        if matches!(self.tok.tok, Tok::Comma) && self.peek_is_attr("execution_thread") {
            self.bump();
            self.bump();
            execution_thread = Some(self.string()?);
        }
        let c = &mut self.comps[id.index()];
        c.instrs = instrs;
        c.root = root;
        c.params = params;
        c.execution_thread = execution_thread;
        self.comp_names.insert(name.to_string(), id);
        Ok((id, is_entry))
    }

    /// Parameters of a computation indexed by number; numbers must be dense and unique.
    fn collect_params(
        &self,
        instrs: &[InstrId],
        name: &str,
        close: &Token<'a>,
    ) -> PResult<Vec<InstrId>> {
        let count = instrs
            .iter()
            .filter(|i| self.instrs[i.index()].parameter_number.is_some())
            .count();
        // Numbers must be 0..count, so nothing is allocated for a huge number.
        let mut params: Vec<Option<InstrId>> = vec![None; count];
        for &iid in instrs {
            let Some(n) = self.instrs[iid.index()].parameter_number else {
                continue;
            };
            let at = self.spans.instr_offsets[iid.index()];
            let n = usize::try_from(n).ok().filter(|&n| n < count).ok_or_else(|| {
                ParseError::new(
                    at,
                    1,
                    format!(
                        "parameter number {n} is out of range: computation '{name}' has {count} parameter(s)"
                    ),
                )
                .with_hint(format!("parameters are numbered from 0 to {}", count - 1))
            })?;
            if params[n].replace(iid).is_some() {
                return Err(ParseError::new(
                    at,
                    1,
                    format!("duplicate parameter number {n}"),
                ));
            }
        }
        params
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                p.ok_or_else(|| {
                    self.err_at(
                        close,
                        format!("computation '{name}' is missing parameter({i})"),
                    )
                })
            })
            .collect()
    }

    fn peek_is_attr(&mut self, name: &str) -> bool {
        self.peek_next().tok == Tok::AttrName(name)
    }

    /// `(p0: shape, ...) -> shape`; returns the declared result shape.
    fn program_shape(&mut self) -> PResult<Shape> {
        self.expect(Tok::LParen, "'('")?;
        if !self.eat(Tok::RParen) {
            loop {
                match self.tok.tok {
                    Tok::Name(_) => {
                        self.bump();
                        self.eat(Tok::Colon);
                    }
                    _ => return Err(self.expected("a parameter name")),
                }
                self.shape()?;
                if self.eat(Tok::RParen) {
                    break;
                }
                self.expect(Tok::Comma, "',' or ')'")?;
            }
        }
        self.expect(Tok::Arrow, "'->'")?;
        self.shape()
    }

    // ----- instructions --------------------------------------------------------

    fn instruction(&mut self, comp: CompId, order: &mut Vec<InstrId>) -> PResult<InstrId> {
        let name_tok = self.tok;
        self.cur_instr_start = name_tok.start;
        let name = match self.tok.tok {
            Tok::AttrName(n) => {
                self.bump();
                n
            }
            Tok::Name(n) | Tok::Ident(n) => {
                self.bump();
                self.expect(Tok::Eq, "'=' after the instruction name")?;
                n
            }
            _ => return Err(self.expected("an instruction")),
        };
        if self.scope.contains_key(name) {
            return Err(self.err_at(
                &name_tok,
                format!("instruction name '{name}' is used twice in this computation"),
            ));
        }
        let id = self.instruction_rhs(name.to_string(), comp, order)?;
        self.scope.insert(name, id);
        Ok(id)
    }

    fn resolve_opcode(&self, t: &Token<'a>) -> PResult<(Opcode, Option<Opcode>)> {
        let Tok::Ident(s) = t.tok else {
            return Err(self.err_at(t, format!("expected an opcode, found {}", t.tok.describe())));
        };
        if let Some(op) = Opcode::from_name(s) {
            return Ok((op, None));
        }
        for (suffix, op) in [
            ("-start", Opcode::AsyncStart),
            ("-update", Opcode::AsyncUpdate),
            ("-done", Opcode::AsyncDone),
        ] {
            if let Some(inner) = s.strip_suffix(suffix).and_then(Opcode::from_name) {
                return Ok((op, Some(inner)));
            }
        }
        let mut e = self.err_at(t, format!("unknown opcode '{s}'"));
        if let Some(best) = closest_opcode(s) {
            e = e.with_hint(format!("did you mean '{best}'?"));
        }
        Err(e)
    }

    fn instruction_rhs(
        &mut self,
        name: String,
        comp: CompId,
        order: &mut Vec<InstrId>,
    ) -> PResult<InstrId> {
        self.enter()?;
        let r = self.instruction_rhs_inner(name, comp, order);
        self.leave();
        r
    }

    fn instruction_rhs_inner(
        &mut self,
        name: String,
        comp: CompId,
        order: &mut Vec<InstrId>,
    ) -> PResult<InstrId> {
        let shape = if self.at_shape_start() {
            let mut s = self.shape()?;
            s.fill_default_layouts();
            Some(s)
        } else {
            None
        };
        let op_tok = self.bump();
        if shape.is_none() && matches!(self.tok.tok, Tok::LBracket) {
            return Err(self.unknown_type(&op_tok));
        }
        let (opcode, sugar) = self.resolve_opcode(&op_tok)?;
        self.expect(Tok::LParen, "'(' after the opcode")?;
        let mut parameter_number = None;
        let mut literal = None;
        let mut operands = Vec::new();
        match opcode {
            Opcode::Parameter => parameter_number = Some(self.int()?),
            Opcode::Constant => match &shape {
                Some(sh) => literal = Some(self.literal(sh)?),
                None => return Err(self.missing_shape(&op_tok, &name)),
            },
            _ => {
                if !matches!(self.tok.tok, Tok::RParen) {
                    loop {
                        operands.push(self.operand(comp, order)?);
                        if !self.eat(Tok::Comma) {
                            break;
                        }
                    }
                }
            }
        }
        self.expect(Tok::RParen, "')' to close the operand list")?;
        if shape.is_none() && opcode == Opcode::Parameter {
            return Err(self.missing_shape(&op_tok, &name));
        }
        let arity = if sugar.is_some() && opcode == Opcode::AsyncStart {
            Opcode::AsyncStart.arity()
        } else {
            opcode.arity()
        };
        if !arity.accepts(operands.len()) {
            return Err(self.err_at(
                &op_tok,
                format!(
                    "'{}' takes {} but has {} operand(s)",
                    op_tok_text(&op_tok),
                    describe_arity(arity),
                    operands.len()
                ),
            ));
        }
        let mut attrs: Vec<Attr> = Vec::new();
        // Reused across instructions: a set per instruction would allocate every time.
        self.seen_attrs.clear();
        while self.eat(Tok::Comma) {
            let t = self.bump();
            let Tok::AttrName(aname) = t.tok else {
                return Err(self.err_at(
                    &t,
                    format!(
                        "expected an attribute like 'name=value', found {}",
                        t.tok.describe()
                    ),
                ));
            };
            if !self.seen_attrs.insert(aname) {
                return Err(self.err_at(&t, format!("duplicate attribute '{aname}'")));
            }
            let value = self.attr_value(aname)?;
            attrs.push(Attr {
                name: intern_attr_name(aname),
                value,
            });
        }
        attrs.sort_by_key(|a| print_rank(&a.name));
        let shape = match (self.derived_shape(opcode, &operands), shape) {
            (Some(derived), _) => derived,
            (None, Some(s)) => s,
            (None, None) => {
                self.infer_missing_shape(opcode, sugar, &operands, &attrs, &op_tok, &name)?
            }
        };
        let id = InstrId(self.instrs.len() as u32);
        self.push_instr(Instruction {
            name,
            opcode,
            shape,
            operands,
            attrs,
            parent: comp,
            parameter_number,
            literal,
            async_sugar: sugar,
        });
        order.push(id);
        if opcode == Opcode::AsyncStart && sugar.is_some() {
            self.build_async_wrapped(id)?;
        }
        Ok(id)
    }

    /// XLA builds these ops from their operands and ignores the written shape.
    fn derived_shape(&self, op: Opcode, operands: &[InstrId]) -> Option<Shape> {
        let operand = |i: usize| operands.get(i).map(|o| &self.instrs[o.index()].shape);
        match op {
            Opcode::RecvDone => {
                let data = operand(0)?.tuple_elements()?.first()?.clone();
                Some(Shape::Tuple(vec![data, Shape::token()]))
            }
            Opcode::SendDone => Some(Shape::token()),
            Opcode::Send => {
                let mut ctx = Shape::scalar(PrimitiveType::U32);
                ctx.fill_default_layouts();
                Some(Shape::Tuple(vec![operand(0)?.clone(), ctx, Shape::token()]))
            }
            _ => None,
        }
    }

    /// `t` is followed by `[`, so it was meant as an element type.
    fn unknown_type(&self, t: &Token<'a>) -> ParseError {
        let name = op_tok_text(t);
        let mut e = self.err_at(t, format!("unknown element type '{name}'"));
        if let Some(n) = closest(name, PrimitiveType::ALL.iter().map(|ty| ty.name()), 2) {
            e = e.with_hint(format!("did you mean '{n}'?"));
        }
        e
    }

    fn missing_shape(&self, op_tok: &Token<'a>, name: &str) -> ParseError {
        self.err_at(op_tok, format!("instruction '{name}' has no result shape"))
            .with_hint("write the shape before the opcode, e.g. 'x = f32[4]{0} add(a, b)'")
    }

    /// Infers the shape of an instruction written without one, as XLA does.
    fn infer_missing_shape(
        &self,
        op: Opcode,
        sugar: Option<Opcode>,
        operands: &[InstrId],
        attrs: &[Attr],
        op_tok: &Token<'a>,
        name: &str,
    ) -> PResult<Shape> {
        if sugar.is_some() {
            return Err(self.missing_shape(op_tok, name));
        }
        let shapes: Vec<&Shape> = operands
            .iter()
            .map(|o| &self.instrs[o.index()].shape)
            .collect();
        let sigs = crate::infer::ArenaSignatures {
            comps: &self.comps,
            instrs: &self.instrs,
        };
        match crate::infer::infer_shape(op, &shapes, attrs, &sigs) {
            Ok(mut s) => {
                s.fill_default_layouts();
                Ok(s)
            }
            Err(crate::infer::InferError::NotInferable(_)) => Err(self.missing_shape(op_tok, name)),
            Err(crate::infer::InferError::Invalid(msg)) => Err(self.err_at(op_tok, msg)),
        }
    }

    /// For `X-start(ops), attrs` sugar: builds the hidden computation holding one
    /// `X` over parameters, and links the start to it with `calls`.
    fn build_async_wrapped(&mut self, start: InstrId) -> PResult<()> {
        let s = &self.instrs[start.index()];
        let inner_op = s.async_sugar.expect("sugar start");
        let operand_shapes: Vec<Shape> = s
            .operands
            .iter()
            .map(|o| self.instrs[o.index()].shape.clone())
            .collect();
        let result_shape = match &s.shape {
            Shape::Tuple(t) if t.len() >= 2 => t[1].clone(),
            other => other.clone(),
        };
        let inner_attrs: Vec<Attr> = s
            .attrs
            .iter()
            .filter(|a| {
                !matches!(
                    a.name.as_ref(),
                    "metadata"
                        | "backend_config"
                        | "frontend_attributes"
                        | "sharding"
                        | "control-predecessors"
                        | "async_execution_thread"
                )
            })
            .cloned()
            .collect();
        let comp = CompId(self.comps.len() as u32);
        let comp_name = format!("{}.async_wrapped", s.name);
        let start_offset = self.spans.instr_offsets[start.index()];
        let inner_name = format!("{}.wrapped", s.name);
        let mut instrs = Vec::new();
        let mut params = Vec::new();
        for (i, sh) in operand_shapes.into_iter().enumerate() {
            let pid = InstrId(self.instrs.len() as u32);
            self.push_instr(Instruction {
                name: format!("param_{i}"),
                opcode: Opcode::Parameter,
                shape: sh,
                operands: Vec::new(),
                attrs: Vec::new(),
                parent: comp,
                parameter_number: Some(i as i64),
                literal: None,
                async_sugar: None,
            });
            instrs.push(pid);
            params.push(pid);
        }
        let root = InstrId(self.instrs.len() as u32);
        self.push_instr(Instruction {
            name: inner_name,
            opcode: inner_op,
            shape: result_shape,
            operands: params.clone(),
            attrs: inner_attrs,
            parent: comp,
            parameter_number: None,
            literal: None,
            async_sugar: None,
        });
        instrs.push(root);
        self.push_comp_offset(start_offset);
        self.comps.push(Computation {
            name: comp_name,
            instrs,
            root,
            params,
            is_entry: false,
            execution_thread: None,
            is_async_sugar: true,
        });
        self.instrs[start.index()].attrs.push(Attr {
            name: "calls".into(),
            value: AttrValue::Comp(comp),
        });
        Ok(())
    }

    fn operand(&mut self, comp: CompId, order: &mut Vec<InstrId>) -> PResult<InstrId> {
        let written = if self.at_shape_start() {
            Some((self.tok, self.shape()?))
        } else {
            None
        };
        let t = self.tok;
        let id = match t.tok {
            Tok::Name(n) => {
                self.bump();
                self.lookup(n, &t)?
            }
            Tok::Ident(n) => {
                self.bump();
                if matches!(self.tok.tok, Tok::LParen) {
                    self.nested_instruction(
                        n,
                        &t,
                        written.as_ref().map(|w| w.1.clone()),
                        comp,
                        order,
                    )?
                } else if matches!(self.tok.tok, Tok::LBracket) && written.is_none() {
                    return Err(self.unknown_type(&t));
                } else {
                    self.lookup(n, &t)?
                }
            }
            _ => return Err(self.expected("an operand name")),
        };
        if let Some((st, ws)) = written {
            let actual = &self.instrs[id.index()].shape;
            if !ws.compatible(actual) {
                return Err(self.err_at(
                    &st,
                    format!(
                        "operand shape {} does not match the shape {} of '{}'",
                        ws.without_layouts(),
                        actual.without_layouts(),
                        self.instrs[id.index()].name
                    ),
                ));
            }
        }
        Ok(id)
    }

    fn lookup(&self, n: &str, t: &Token<'a>) -> PResult<InstrId> {
        self.scope.get(n).copied().ok_or_else(|| {
            self.err_at(t, format!("use of undefined instruction '{n}'"))
                .with_hint("operands must be defined earlier in the same computation")
        })
    }

    /// An anonymous instruction written inline as an operand (test syntax).
    fn nested_instruction(
        &mut self,
        opcode: &'a str,
        op_tok: &Token<'a>,
        shape: Option<Shape>,
        comp: CompId,
        order: &mut Vec<InstrId>,
    ) -> PResult<InstrId> {
        let Some(mut shape) = shape else {
            return Err(self.err_at(
                op_tok,
                format!("nested instruction '{opcode}' needs a shape"),
            ));
        };
        shape.fill_default_layouts();
        let (op, _) = self.resolve_opcode(op_tok)?;
        self.enter_weighted(2)?;
        self.expect(Tok::LParen, "'('")?;
        let mut operands = Vec::new();
        let mut parameter_number = None;
        let mut literal = None;
        if op == Opcode::Parameter {
            parameter_number = Some(self.int()?);
        } else if op == Opcode::Constant {
            literal = Some(self.literal(&shape)?);
        } else if !matches!(self.tok.tok, Tok::RParen) {
            loop {
                operands.push(self.operand(comp, order)?);
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
        }
        self.expect(Tok::RParen, "')'")?;
        self.leave_weighted(2);
        let n = self.anon_counts.entry(opcode).or_insert(0);
        let name = if *n == 0 {
            format!("{opcode}.anon")
        } else {
            format!("{opcode}.anon.{n}")
        };
        *n += 1;
        let id = InstrId(self.instrs.len() as u32);
        self.push_instr(Instruction {
            name,
            opcode: op,
            shape,
            operands,
            attrs: Vec::new(),
            parent: comp,
            parameter_number,
            literal,
            async_sugar: None,
        });
        order.push(id);
        Ok(id)
    }
}

/// Token equality with a cheap discriminant test first (the parser's hottest comparison).
#[inline]
fn same_token(a: &Tok, b: &Tok) -> bool {
    if std::mem::discriminant(a) != std::mem::discriminant(b) {
        return false;
    }
    match (a, b) {
        (Tok::Ident(x), Tok::Ident(y))
        | (Tok::AttrName(x), Tok::AttrName(y))
        | (Tok::Name(x), Tok::Name(y))
        | (Tok::DimLabels(x), Tok::DimLabels(y))
        | (Tok::Dxd(x), Tok::Dxd(y))
        | (Tok::Pad(x), Tok::Pad(y)) => x == y,
        (Tok::Int(x), Tok::Int(y)) => x == y,
        (Tok::UInt64(x), Tok::UInt64(y)) => x == y,
        (Tok::Decimal(x), Tok::Decimal(y)) => x.to_bits() == y.to_bits(),
        (Tok::Str(x), Tok::Str(y)) => x == y,
        (Tok::Error(x), Tok::Error(y)) => x == y,
        // Same discriminant and no payload.
        _ => true,
    }
}

fn op_tok_text<'a>(t: &Token<'a>) -> &'a str {
    match t.tok {
        Tok::Ident(s) => s,
        _ => "?",
    }
}

fn describe_arity(a: crate::opcode::Arity) -> String {
    match a {
        crate::opcode::Arity::Exact(1) => "exactly 1 operand".into(),
        crate::opcode::Arity::Exact(n) => format!("exactly {n} operands"),
        crate::opcode::Arity::AtLeast(n) => format!("at least {n} operand(s)"),
        crate::opcode::Arity::Variadic => "any number of operands".into(),
    }
}

fn closest_opcode(s: &str) -> Option<&'static str> {
    closest(s, Opcode::ALL.iter().map(|op| op.name()), 3)
}

/// The candidate nearest to `typed` within `max` edits, counting a swap of two
/// neighbouring letters as one edit (`tahn` is one from `tanh`); ties go to
/// the candidate of the same length, then the first in alphabetical order.
fn closest<'n>(
    typed: &str,
    candidates: impl Iterator<Item = &'n str>,
    max: usize,
) -> Option<&'n str> {
    // The distance is at least the length difference: skipping distant names
    // keeps a megabyte-long identifier from costing seconds.
    candidates
        .filter(|n| typed.len().abs_diff(n.len()) <= max)
        .map(|n| {
            let distance = strsim::osa_distance(typed, n);
            (distance, typed.len().abs_diff(n.len()), n)
        })
        .filter(|&(d, _, _)| d <= max)
        .min()
        .map(|(_, _, n)| n)
}

#[cfg(test)]
mod pipeline_tests {
    use super::*;

    /// The lexer-thread pipeline must give exactly the sequential result, on
    /// every corpus file (whatever its size) and on its failures.
    #[test]
    fn pipelined_parse_equals_sequential() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
        let mut dirs = vec![root.join("corpus"), root.join("errors")];
        let mut files = 0;
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                let sequential = parse_all(&mut Parser::new(&text, None));
                match (parse_pipelined(&text), sequential) {
                    (Ok(a), Ok(b)) => assert!(a == b, "{}: results differ", path.display()),
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!(
                        "{}: pipelined ok={} sequential ok={}",
                        path.display(),
                        a.is_ok(),
                        b.is_ok()
                    ),
                }
                files += 1;
            }
        }
        assert!(files > 300, "{files}");
    }
}
