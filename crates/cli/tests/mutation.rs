//! Seeded mutation test: small HLO modules from `testdata/` are mutated at the
//! text level (numbers, tokens, lines, operands, element types, dimensions,
//! opcodes, truncation) and each mutant goes through the library pipeline the
//! CLI uses, in process: parse and verify (`check`, `fmt`), partition, compile
//! and price on v5e (`analyze`), build every profiler view in memory (`trace`:
//! the schedule replay, the Chrome trace serialized into a sink, the HTML
//! report and the encoded XSpace) for every mutant that priced, and run with random
//! inputs (`run`) when the module verified and is small (under a step budget,
//! so loops run too). No stage may panic or hang on any mutant; errors are the
//! expected answer to most of them.
//!
//! Deterministic: mutant `i` depends only on `SEED`, `i` and the corpus.
//! - `TPUSIM_MUTANT=<i>` replays mutant `i` alone, printing it and letting a
//!   panic escape (with `RUST_BACKTRACE=1` for its backtrace);
//! - `TPUSIM_MUTANTS=<n>` changes how many mutants are tried (default 10,000),
//!   `TPUSIM_MUTANTS_FROM=<i>` the first one's index (default 0);
//! - `TPUSIM_MUTANTS_VERBOSE=1` prints the outcome of every mutant.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tpusim_hlo::{Module, Opcode, PrimitiveType, SourceMap};

const SEED: u64 = 0x7470_7573_696d_0014;
const DEFAULT_MUTANTS: usize = 10_000;
/// Corpus files larger than this are left out (counted and printed).
const MAX_FILE_BYTES: u64 = 20 * 1024;
/// Modules whose estimated run memory (all devices) exceeds this are not run.
const MAX_RUN_BYTES: u64 = 256 << 10;
/// Steps (instructions evaluated, all devices) a mutant's run may take.
const MAX_RUN_STEPS: u64 = 200_000;
/// Modules with more instructions than this are not run (keeps debug builds fast).
const MAX_RUN_INSTRUCTIONS: usize = 400;
/// One mutant taking longer than this is a hang: the test stops and names it.
const HANG: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Deterministic randomness (splitmix64).

struct Rng(u64);

impl Rng {
    fn for_mutant(index: usize) -> Rng {
        let mut r = Rng(SEED ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> Option<&'a T> {
        if xs.is_empty() {
            None
        } else {
            Some(&xs[self.below(xs.len())])
        }
    }
}

// ---------------------------------------------------------------------------
// The corpus.

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn collect(dir: &Path, small: &mut Vec<PathBuf>, large: &mut usize) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, small, large);
        } else if p.extension().is_some_and(|x| x == "hlo") {
            let len = std::fs::metadata(&p).expect("metadata").len();
            if len <= MAX_FILE_BYTES {
                small.push(p);
            } else {
                *large += 1;
            }
        }
    }
}

/// (path relative to testdata, text) of every small `.hlo` file.
fn corpus() -> Vec<(String, String)> {
    let root = testdata();
    let (mut small, mut large) = (Vec::new(), 0);
    collect(&root, &mut small, &mut large);
    let mut files = Vec::new();
    let mut not_utf8 = 0;
    for p in &small {
        let name = p.strip_prefix(&root).unwrap_or(p).display().to_string();
        match String::from_utf8(std::fs::read(p).expect("read corpus file")) {
            Ok(text) => files.push((name, text)),
            Err(_) => not_utf8 += 1,
        }
    }
    eprintln!(
        "corpus: {} .hlo files of at most {MAX_FILE_BYTES} bytes used, {large} larger ones left out, {not_utf8} not UTF-8",
        files.len()
    );
    assert!(files.len() >= 100, "corpus too small: {}", files.len());
    assert_eq!(not_utf8, 0, "corpus files that are not UTF-8");
    files
}

// ---------------------------------------------------------------------------
// Mutations.

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "4294967295",
    "4294967296",
    "2147483648",
    "2147483647",
    "-2147483648",
    "9223372036854775807",
    "18446744073709551615",
    "99999999999999999999",
    "65536",
    "1000000",
];

const TYPES: &[&str] = &[
    "pred", "s4", "s8", "s16", "s32", "s64", "u4", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
    "f64", "c64", "c128", "f8e4m3fn", "f8e5m2", "token",
];

/// Byte ranges of the tokens of `text`: runs of identifier characters
/// (letters, digits, `_`, `.`, `-`) and single other non-space characters.
fn tokens(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
        } else if word(b[i]) {
            let s = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            out.push((s, i));
        } else {
            // Keep multi-byte UTF-8 characters whole.
            let s = i;
            i += 1;
            while i < b.len() && !text.is_char_boundary(i) {
                i += 1;
            }
            out.push((s, i));
        }
    }
    out
}

/// Byte ranges of maximal digit runs (with a leading `-` when there is one).
fn numbers(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let mut s = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if s > 0 && b[s - 1] == b'-' {
                s -= 1;
            }
            // Digits inside names (`add.3`, `%p0`) only make undefined names.
            let in_name = s > 0 && (is_word_byte(b[s - 1]) || matches!(b[s - 1], b'.' | b'%'));
            if !in_name {
                out.push((s, i));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Line ranges (without the newline).
fn lines(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = 0;
    for (k, c) in text.char_indices() {
        if c == '\n' {
            out.push((s, k));
            s = k + 1;
        }
    }
    if s < text.len() {
        out.push((s, text.len()));
    }
    out
}

fn splice(text: &str, (s, e): (usize, usize), with: &str) -> String {
    format!("{}{with}{}", &text[..s], &text[e..])
}

fn line_no(text: &str, at: usize) -> usize {
    text[..at].bytes().filter(|&c| c == b'\n').count() + 1
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Tokens that are element-type names followed by `[` (shapes).
fn type_tokens(text: &str) -> Vec<(usize, usize)> {
    tokens(text)
        .into_iter()
        .filter(|&(s, e)| {
            PrimitiveType::from_name(&text[s..e]).is_some() && text[e..].starts_with('[')
        })
        .collect()
}

/// Tokens that are opcode names followed by `(`.
fn opcode_tokens(text: &str) -> Vec<(usize, usize)> {
    tokens(text)
        .into_iter()
        .filter(|&(s, e)| Opcode::from_name(&text[s..e]).is_some() && text[e..].starts_with('('))
        .collect()
}

/// The dimension lists of shapes: the ranges inside `[...]` right after a type name.
fn dim_lists(text: &str) -> Vec<(usize, usize)> {
    type_tokens(text)
        .into_iter()
        .filter_map(|(_, e)| {
            let close = text[e..].find(']')?;
            Some((e + 1, e + close))
        })
        .collect()
}

/// Top-level comma-separated parts inside the parentheses opened at `open`.
fn operand_parts(text: &str, open: usize) -> Option<Vec<(usize, usize)>> {
    let b = text.as_bytes();
    let mut depth = 0i32;
    let mut parts = Vec::new();
    let mut start = open + 1;
    for (k, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    parts.push((start, k));
                    return Some(parts);
                }
            }
            b',' if depth == 1 => {
                parts.push((start, k));
                start = k + 1;
            }
            b'\n' => return None,
            _ => {}
        }
    }
    None
}

fn random_number(rng: &mut Rng, old: &str) -> String {
    match rng.below(4) {
        0 => (rng.below(9) as i64 - 1).to_string(),
        1 => {
            let n: i128 = old.parse().unwrap_or(0);
            (n + if rng.below(2) == 0 { 1 } else { -1 }).to_string()
        }
        _ => rng.pick(NUMBERS).unwrap().to_string(),
    }
}

/// One mutation of `text`: the new text and what was done, or `None` when
/// the text has nothing this kind of mutation applies to.
fn mutate_once(text: &str, rng: &mut Rng) -> Option<(String, String)> {
    // Weighted towards mutations that keep the text parsable, so that later
    // stages see many mutants: numbers, types, dims, opcodes, operand order.
    const KINDS: [u8; 24] = [
        0, 0, 0, 0, 0, 0, 2, 3, 4, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 11,
    ];
    match KINDS[rng.below(KINDS.len())] {
        0 => {
            let r = *rng.pick(&numbers(text))?;
            let new = random_number(rng, &text[r.0..r.1]);
            Some((
                splice(text, r, &new),
                format!(
                    "line {}: number `{}` -> `{new}`",
                    line_no(text, r.0),
                    &text[r.0..r.1]
                ),
            ))
        }
        2 => {
            let r = *rng.pick(&tokens(text))?;
            Some((
                splice(text, r, ""),
                format!(
                    "line {}: deleted token `{}`",
                    line_no(text, r.0),
                    &text[r.0..r.1]
                ),
            ))
        }
        3 => {
            let r = *rng.pick(&tokens(text))?;
            let t = &text[r.0..r.1];
            Some((
                splice(text, r, &format!("{t} {t}")),
                format!("line {}: duplicated token `{t}`", line_no(text, r.0)),
            ))
        }
        4 => {
            let r = *rng.pick(&lines(text))?;
            let end = (r.1 + 1).min(text.len());
            Some((
                splice(text, (r.0, end), ""),
                format!("line {}: deleted line", line_no(text, r.0)),
            ))
        }
        5 => {
            let r = *rng.pick(&lines(text))?;
            let l = &text[r.0..r.1];
            Some((
                splice(text, r, &format!("{l}\n{l}")),
                format!("line {}: duplicated line", line_no(text, r.0)),
            ))
        }
        6 => {
            // Swap two operands of an instruction.
            let candidates: Vec<Vec<(usize, usize)>> = opcode_tokens(text)
                .into_iter()
                .filter_map(|(_, e)| operand_parts(text, e))
                .filter(|p| p.len() >= 2)
                .collect();
            let parts = rng.pick(&candidates)?;
            let a = rng.below(parts.len());
            let mut b = rng.below(parts.len() - 1);
            if b >= a {
                b += 1;
            }
            let (a, b) = (parts[a.min(b)], parts[a.max(b)]);
            let new = format!(
                "{}{}{}{}{}",
                &text[..a.0],
                &text[b.0..b.1],
                &text[a.1..b.0],
                &text[a.0..a.1],
                &text[b.1..]
            );
            Some((
                new,
                format!(
                    "line {}: swapped operands `{}` and `{}`",
                    line_no(text, a.0),
                    text[a.0..a.1].trim(),
                    text[b.0..b.1].trim()
                ),
            ))
        }
        7 => {
            let r = *rng.pick(&type_tokens(text))?;
            let new = rng.pick(TYPES).unwrap();
            Some((
                splice(text, r, new),
                format!(
                    "line {}: element type `{}` -> `{new}`",
                    line_no(text, r.0),
                    &text[r.0..r.1]
                ),
            ))
        }
        8 => {
            // Change, drop or add one dimension of a shape.
            let r = *rng.pick(&dim_lists(text))?;
            let dims: Vec<&str> = text[r.0..r.1]
                .split(',')
                .filter(|d| !d.is_empty())
                .collect();
            let mut new: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            match rng.below(3) {
                0 if !new.is_empty() => {
                    let k = rng.below(new.len());
                    new[k] = random_number(rng, dims[k]);
                }
                1 if !new.is_empty() => {
                    new.remove(rng.below(new.len()));
                }
                _ => {
                    let k = rng.below(new.len() + 1);
                    new.insert(k, random_number(rng, "1"));
                }
            }
            let rank_changed = new.len() != dims.len();
            let new = new.join(",");
            // A layout lists every dim: drop it with a rank change, or the
            // parser refuses every such mutant.
            let mut end = r.1;
            if rank_changed && text[r.1..].starts_with("]{") {
                if let Some(close) = text[r.1..].find('}') {
                    end = r.1 + close + 1;
                }
            }
            let replaced = if end == r.1 {
                splice(text, r, &new)
            } else {
                splice(text, (r.0, end), &format!("{new}]"))
            };
            Some((
                replaced,
                format!(
                    "line {}: dims [{}] -> [{new}]",
                    line_no(text, r.0),
                    &text[r.0..r.1]
                ),
            ))
        }
        9 => {
            let r = *rng.pick(&opcode_tokens(text))?;
            let new = rng.pick(Opcode::ALL).unwrap().name();
            Some((
                splice(text, r, new),
                format!(
                    "line {}: opcode `{}` -> `{new}`",
                    line_no(text, r.0),
                    &text[r.0..r.1]
                ),
            ))
        }
        10 => {
            let mut at = rng.below(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            Some((
                text[..at].to_string(),
                format!("truncated at byte {at} (line {})", line_no(text, at)),
            ))
        }
        _ => {
            // Replace a whole word-like token by a number or an attribute by another's value.
            let toks: Vec<(usize, usize)> = tokens(text)
                .into_iter()
                .filter(|&(s, e)| text.as_bytes()[s..e].iter().all(|&c| is_word_byte(c)))
                .collect();
            let r = *rng.pick(&toks)?;
            let new = random_number(rng, "0");
            Some((
                splice(text, r, &new),
                format!(
                    "line {}: word `{}` -> `{new}`",
                    line_no(text, r.0),
                    &text[r.0..r.1]
                ),
            ))
        }
    }
}

/// Mutant `index`: (corpus file, mutations applied, text).
fn mutant(files: &[(String, String)], index: usize) -> (String, Vec<String>, String) {
    let mut rng = Rng::for_mutant(index);
    let (name, text) = &files[rng.below(files.len())];
    let mut text = text.clone();
    let mut what = Vec::new();
    // Mostly one mutation, sometimes a few stacked.
    let count = [1, 1, 1, 1, 2, 2, 3][rng.below(7)];
    let mut tries = 0;
    while what.len() < count && tries < 20 {
        tries += 1;
        if let Some((t, w)) = mutate_once(&text, &mut rng) {
            if t != text {
                text = t;
                what.push(w);
            }
        }
    }
    (name.clone(), what, text)
}

// ---------------------------------------------------------------------------
// The pipeline (what `check`, `fmt`, `analyze` and `run` do, in process).

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    ParseError,
    VerifyError,
    PartitionError,
    PodError,
    AnalyzeError,
    /// Priced, but building the views failed.
    Analyzed,
    /// Priced and every view built.
    Traced,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RunOutcome {
    NotRun,
    SkippedLarge,
    Error,
    Ok,
}

/// The outcome of the most advanced module of the file.
#[derive(Debug)]
struct Verdict {
    outcome: Outcome,
    run: RunOutcome,
    /// Last error message (for verbose output).
    note: String,
}

fn pipeline(text: &str, index: usize) -> Verdict {
    let mut res = Verdict {
        outcome: Outcome::ParseError,
        run: RunOutcome::NotRun,
        note: String::new(),
    };
    let modules = match timed(0, || tpusim_hlo::parse_modules_with_spans(text)) {
        Ok(m) => m,
        Err(e) => {
            res.note = e.render("mutant.hlo", text);
            return res;
        }
    };
    res.outcome = Outcome::VerifyError;
    let mut best = (Outcome::ParseError, RunOutcome::NotRun);
    for (m, spans) in &modules {
        let (o, r) = one_module(text, m, spans, index, &mut res.note);
        best = best.max((o, r));
    }
    (res.outcome, res.run) = if modules.is_empty() {
        (Outcome::VerifyError, RunOutcome::NotRun)
    } else {
        best
    };
    res
}

fn one_module(
    text: &str,
    m: &Module,
    spans: &SourceMap,
    index: usize,
    note: &mut String,
) -> (Outcome, RunOutcome) {
    // `fmt` prints whatever parsed.
    if let Err(errors) = timed(0, || {
        let _ = tpusim_hlo::print_module(m);
        tpusim_hlo::verify(m)
    }) {
        for e in &errors {
            *note = e.render("mutant.hlo", text, m, spans);
        }
        return (Outcome::VerifyError, RunOutcome::NotRun);
    }
    let (outcome, partitioned) = analyze(m, index, note);
    let run = match partitioned {
        Some(p) => timed(2, || run(m, &p, index, note)),
        None => RunOutcome::NotRun,
    };
    (outcome, run)
}

/// `analyze --chip v5e` (every fourth mutant `--as-given`): the outcome and
/// the partitioned module `run` would execute.
fn analyze(m: &Module, index: usize, note: &mut String) -> (Outcome, Option<Module>) {
    let partitioned = if tpusim_spmd::needs_partitioning(m) {
        let options = tpusim_spmd::PartitionOptions::default();
        let p = timed(1, || {
            tpusim_spmd::mesh_of(m, &options).and_then(|_| tpusim_spmd::partition(m, &options))
        });
        match p {
            Ok(p) => p,
            Err(e) => {
                *note = e.to_string();
                return (Outcome::PartitionError, None);
            }
        }
    } else {
        m.clone()
    };
    let chip = tpusim_arch::by_id("v5e").expect("v5e is a builtin chip");
    let pod = match tpusim_pod::PodOptions::default().model_for(&chip, &partitioned) {
        Ok(p) => p,
        Err(e) => {
            *note = e.to_string();
            return (Outcome::PodError, Some(partitioned));
        }
    };
    let comm: &dyn tpusim_perf::CommModel = match &pod {
        Some(p) => p,
        None => &tpusim_perf::LocalOnly,
    };
    let mode = if index % 4 == 3 {
        tpusim_compile::Mode::AsGiven
    } else {
        tpusim_compile::Mode::Compile
    };
    let opts = tpusim_compile::CompileOptions::default();
    let priced = timed(1, || {
        let r = tpusim_compile::analyze(&partitioned, &chip, comm, mode, &opts);
        if let Ok((prepared, a)) = &r {
            let _ = serde_json::to_string(a).expect("analysis serializes");
            let timed = tpusim_perf::timed_module(&prepared.module);
            if let Some(op) = a.ops.first() {
                let _ = tpusim_perf::tensorcore::explain_op(timed.module(), &chip, &op.name);
            }
        }
        r
    });
    let (prepared, a) = match priced {
        Ok(p) => p,
        Err(e) => {
            *note = e.to_string();
            return (Outcome::AnalyzeError, Some(partitioned));
        }
    };
    let outcome = timed(3, || trace(&prepared.module, &chip, &a, comm, note));
    (outcome, Some(partitioned))
}

/// `trace`: every view `tpusim trace` writes, built in memory (the Chrome
/// trace serialized into a sink).
fn trace(
    m: &Module,
    chip: &tpusim_arch::Chip,
    a: &tpusim_perf::Analysis,
    comm: &dyn tpusim_perf::CommModel,
    note: &mut String,
) -> Outcome {
    let opts = tpusim_views::ViewsOptions {
        generator: "tpusim mutation test".to_string(),
        ..Default::default()
    };
    match tpusim_views::build_views(m, chip, a, comm, &opts) {
        Ok(views) => {
            // Plain JSON: gzip is flate2's work, and slow in a debug build.
            views
                .trace
                .write_json(std::io::sink())
                .expect("the Chrome trace serializes");
            assert!(!views.report_html.is_empty() && !views.xspace.is_empty());
            Outcome::Traced
        }
        Err(e) => {
            *note = e.to_string();
            Outcome::Analyzed
        }
    }
}

/// `run --random-inputs <index> --max-steps MAX_RUN_STEPS` when the module
/// is small (loops included: the step budget ends one that never does).
fn run(global: &Module, m: &Module, index: usize, note: &mut String) -> RunOutcome {
    use tpusim_interp::{memory, npz, GlobalRun, RunLimits};
    if m.instrs.len() > MAX_RUN_INSTRUCTIONS || memory::check(m, MAX_RUN_BYTES).is_err() {
        return RunOutcome::SkippedLarge;
    }
    let unpartitioned = tpusim_spmd::needs_partitioning(global);
    let shapes = if unpartitioned {
        global.entry_parameter_shapes()
    } else {
        match tpusim_interp::spmd::global_parameter_shapes(m) {
            Ok(s) => s,
            Err(e) => {
                *note = e.to_string();
                return RunOutcome::Error;
            }
        }
    };
    let args = match npz::random_args(&shapes, index as u64) {
        Ok(a) => a,
        Err(e) => {
            *note = e.to_string();
            return RunOutcome::Error;
        }
    };
    let output_dims = unpartitioned.then(|| tpusim_interp::spmd::root_leaf_dims(global));
    let opts = GlobalRun {
        output_shardings: None,
        output_dims,
        max_alloc: MAX_RUN_BYTES,
        limits: RunLimits {
            max_steps: Some(MAX_RUN_STEPS),
            ..RunLimits::default()
        },
    };
    match tpusim_interp::run_global(m, args, &opts) {
        Ok(_) => RunOutcome::Ok,
        Err(e) => {
            *note = e.to_string();
            RunOutcome::Error
        }
    }
}

// ---------------------------------------------------------------------------
// The driver.

thread_local! {
    /// The message and location of the last panic on this thread.
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// Microseconds spent in each stage, all mutants together: parse+verify,
/// partition+compile+price, run, trace.
static STAGE_US: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

fn timed<R>(stage: usize, f: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = f();
    STAGE_US[stage].fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    r
}

fn install_quiet_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if QUIET.load(Ordering::SeqCst) {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "<non-string panic>".to_string());
            let at = info
                .location()
                .map_or(String::new(), |l| format!("{}:{}", l.file(), l.line()));
            LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg} at {at}"));
        } else {
            default(info);
        }
    }));
}

fn env_usize(name: &str) -> Option<usize> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a count")),
    )
}

fn first_lines(text: &str, n: usize) -> String {
    let mut out: Vec<&str> = text.lines().take(n).collect();
    if text.lines().count() > n {
        out.push("...");
    }
    out.join("\n")
}

/// The lines the mutations name (`line N: ...`), with their numbers.
fn mutated_lines(text: &str, what: &[String]) -> String {
    let all: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for w in what {
        let n = w
            .strip_prefix("line ")
            .and_then(|r| r.split(':').next())
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(line) = n.and_then(|n| all.get(n.wrapping_sub(1)).map(|l| (n, l))) {
            out.push(format!("{:>5} | {}", line.0, line.1));
        }
    }
    out.join("\n")
}

#[derive(Default)]
struct Counts {
    mutants: usize,
    parsed: usize,
    verified: usize,
    analyzed: usize,
    traced: usize,
    run_tried: usize,
    ran_ok: usize,
    errors: usize,
    by_outcome: BTreeMap<String, usize>,
}

#[test]
fn mutants_never_panic_or_hang() {
    let files = corpus();
    if let Some(index) = env_usize("TPUSIM_MUTANT") {
        let (file, what, text) = mutant(&files, index);
        eprintln!("mutant {index} of {file}: {}\n{text}", what.join("; "));
        let r = pipeline(&text, index);
        eprintln!("outcome: {:?}, run: {:?}\n{}", r.outcome, r.run, r.note);
        return;
    }
    let count = env_usize("TPUSIM_MUTANTS").unwrap_or(DEFAULT_MUTANTS);
    let from = env_usize("TPUSIM_MUTANTS_FROM").unwrap_or(0);
    let verbose = std::env::var("TPUSIM_MUTANTS_VERBOSE").is_ok_and(|v| v == "1");
    let started = Instant::now();
    install_quiet_hook();
    QUIET.store(true, Ordering::SeqCst);
    let in_flight: Mutex<BTreeMap<usize, Instant>> = Mutex::new(BTreeMap::new());
    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    let results: Vec<(usize, std::result::Result<Verdict, String>)> = std::thread::scope(|s| {
        // Watchdog: a mutant that runs too long is a hang; name it and stop.
        s.spawn(|| {
            while !finished.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(200));
                let slow = in_flight
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|(_, t)| t.elapsed() > HANG)
                    .map(|(&i, _)| i);
                if let Some(i) = slow {
                    let (file, what, text) = mutant(&files, i);
                    eprintln!(
                        "HANG: mutant {i} of {file} ran over {HANG:?}: {}\nreplay: TPUSIM_MUTANT={i} cargo test -p tpusim-cli --test mutation\n{}",
                        what.join("; "),
                        first_lines(&text, 30)
                    );
                    std::process::exit(1);
                }
            }
        });
        // Plain threads, not rayon's pool: `run_global` runs each simulated
        // device on its own thread and those use rayon; a pool whose workers
        // all wait for device threads could not serve them.
        let next = AtomicUsize::new(0);
        let results = Mutex::new(Vec::with_capacity(count));
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::thread::scope(|w| {
            for _ in 0..workers {
                w.spawn(|| loop {
                    let i = from + next.fetch_add(1, Ordering::SeqCst);
                    if i >= from + count {
                        break;
                    }
                    let (_, _, text) = mutant(&files, i);
                    in_flight.lock().unwrap().insert(i, Instant::now());
                    let r = catch_unwind(AssertUnwindSafe(|| pipeline(&text, i)))
                        .map_err(|_| LAST_PANIC.with(|p| p.borrow().clone()));
                    in_flight.lock().unwrap().remove(&i);
                    done.fetch_add(1, Ordering::Relaxed);
                    results.lock().unwrap().push((i, r));
                });
            }
        });
        let mut results = results.into_inner().unwrap();
        results.sort_by_key(|r| r.0);
        finished.store(true, Ordering::SeqCst);
        results
    });
    QUIET.store(false, Ordering::SeqCst);
    let elapsed = started.elapsed();

    let mut c = Counts::default();
    let mut panics = Vec::new();
    for (i, r) in &results {
        c.mutants += 1;
        let r = match r {
            Ok(r) => r,
            Err(msg) => {
                panics.push((*i, msg.clone()));
                continue;
            }
        };
        c.parsed += usize::from(r.outcome > Outcome::ParseError);
        c.verified += usize::from(r.outcome > Outcome::VerifyError);
        c.analyzed += usize::from(r.outcome >= Outcome::Analyzed);
        c.traced += usize::from(r.outcome == Outcome::Traced);
        c.run_tried += usize::from(matches!(r.run, RunOutcome::Ok | RunOutcome::Error));
        c.ran_ok += usize::from(r.run == RunOutcome::Ok);
        let error = r.outcome != Outcome::Traced || r.run == RunOutcome::Error;
        c.errors += usize::from(error);
        *c.by_outcome
            .entry(format!("{:?}/{:?}", r.outcome, r.run))
            .or_default() += 1;
        if verbose {
            let (file, what, _) = mutant(&files, *i);
            eprintln!(
                "mutant {i} ({file}: {}): {:?}, run {:?}: {}",
                what.join("; "),
                r.outcome,
                r.run,
                r.note.lines().next().unwrap_or("")
            );
        }
    }
    eprintln!(
        "{} mutants in {:.1} s: {} parsed, {} verified, {} analyzed, {} traced, {} run ({} ok), {} with an error, {} panics",
        c.mutants,
        elapsed.as_secs_f64(),
        c.parsed,
        c.verified,
        c.analyzed,
        c.traced,
        c.run_tried,
        c.ran_ok,
        c.errors,
        panics.len()
    );
    let us = |k: usize| STAGE_US[k].load(Ordering::Relaxed) as f64 / 1e6;
    eprintln!(
        "time in stages (all threads): parse+verify {:.1} s, partition+analyze {:.1} s, trace {:.1} s, run {:.1} s",
        us(0),
        us(1),
        us(3),
        us(2)
    );
    for (k, n) in &c.by_outcome {
        eprintln!("  {k:<28} {n}");
    }
    if !panics.is_empty() {
        // Group by panic site so one bug is reported once, with its first mutant.
        let mut sites: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, msg) in &panics {
            let site = msg.rsplit(" at ").next().unwrap_or(msg).to_string();
            sites.entry(site).or_default().push(*i);
        }
        for (site, ids) in &sites {
            let i = ids[0];
            let (file, what, text) = mutant(&files, i);
            let msg = &panics.iter().find(|p| p.0 == i).unwrap().1;
            eprintln!(
                "\nPANIC at {site} ({} mutants, first {i}): {msg}\n  from {file}: {}\n  replay: TPUSIM_MUTANT={i} cargo test -p tpusim-cli --test mutation -- --nocapture\n{}\n{}",
                ids.len(),
                what.join("; "),
                first_lines(&text, 3),
                mutated_lines(&text, &what)
            );
        }
        panic!(
            "{} of {} mutants panicked at {} sites",
            panics.len(),
            c.mutants,
            sites.len()
        );
    }
    assert_eq!(done.load(Ordering::Relaxed), count);
    // The pipeline must still be exercised: every stage reached by some mutants.
    for (what, n) in [
        ("parsed", c.parsed),
        ("verified", c.verified),
        ("analyzed", c.analyzed),
        ("traced", c.traced),
        ("ran", c.ran_ok),
        ("failed with an error", c.errors),
    ] {
        assert!(n > 0, "no mutant {what}: the pipeline is not exercised");
    }
    // Building the views fails only when cancelled: every priced mutant traces.
    assert_eq!(c.traced, c.analyzed, "a priced mutant did not trace");
}

/// Inputs that crashed or hung a stage before (found by this test or by hand),
/// reduced; each must go through the pipeline without a panic.
const REGRESSIONS: &[(&str, &str)] = &[
    (
        "shard_map exit (LocalToGlobalShape) whose operands are swapped (ranks 3 and 2 for results of ranks 2 and 3)",
        "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=8]>}}\nbody {\n  p = f32[3,2]{1,0} parameter(0)\n  r = f32[1,3,2]{2,1,0} reshape(p)\n  ROOT t = (f32[3,2]{1,0}, f32[1,3,2]{2,1,0}) tuple(p, r)\n}\nENTRY e {\n  a = f32[3,16]{1,0} parameter(0), sharding={devices=[1,8]<=[8]}, frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{}, {\\\"x\\\"}]>\"}\n  l = f32[3,2]{1,0} custom-call(a), custom_call_target=\"xla.sdy.GlobalToLocalShape\", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.in_shardings=\"#sdy.sharding_per_value<[<@mesh, [{}, {\\\"x\\\"}]>]>\",xla.sdy.manual_axes=\"#sdy<manual_axes{\\\"x\\\"}>\"}\n  c = (f32[3,2]{1,0}, f32[1,3,2]{2,1,0}) call(l), to_apply=body\n  c0 = f32[3,2]{1,0} get-tuple-element(c), index=0\n  c1 = f32[1,3,2]{2,1,0} get-tuple-element(c), index=1\n  ROOT g = (f32[3,16]{1,0}, f32[8,3,2]{2,1,0}) custom-call(c1, c0), custom_call_target=\"xla.sdy.LocalToGlobalShape\", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.manual_axes=\"#sdy<manual_axes{\\\"x\\\"}>\",xla.sdy.out_shardings=\"#sdy.sharding_per_value<[<@mesh, [{}, {\\\"x\\\"}]>, <@mesh, [{\\\"x\\\"}, {}, {}]>]>\"}\n}\n",
    ),
    (
        "a channel id at the top of the range (the compiler's next id overflowed)",
        "HloModule m, num_partitions=2\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT r = f32[4] all-reduce(x), channel_id=9223372036854775807, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add\n}\n",
    ),
    (
        "tuple of two arrays whose byte sizes saturate u64 (size sums overflowed)",
        "HloModule m\nENTRY e {\n  a = f32[2305843009213693952] parameter(0)\n  b = f32[2305843009213693952] parameter(1)\n  ROOT t = (f32[2305843009213693952], f32[2305843009213693952]) tuple(a, b)\n}\n",
    ),
    (
        "fusion whose operands are swapped (f32[] given for f32[2,4])",
        "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nf {\n  x = f32[2,4] parameter(0)\n  y = f32[] parameter(1)\n  ROOT r = f32[] reduce(x, y), dimensions={0,1}, to_apply=add\n}\nENTRY e {\n  a = f32[2,4] parameter(0)\n  z = f32[] constant(0)\n  ROOT c = f32[] fusion(z, a), kind=kLoop, calls=f\n}\n",
    ),
    (
        "Sharding custom-call without an operand",
        "HloModule m, num_partitions=2\nENTRY e {\n  x = f32[4] parameter(0), sharding={devices=[2]<=[2]}\n  s = f32[4] custom-call(), custom_call_target=\"Sharding\", sharding={devices=[2]<=[2]}\n  ROOT a = f32[4] add(x, s)\n}\n",
    ),
    (
        "Shardy mesh of 2^32 devices (the u32 product overflowed)",
        "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"a\"=65536, \"b\"=65536]>}}\nENTRY e {\n  x = f32[4] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"a\\\"}]>\"}\n  ROOT n = f32[4] negate(x)\n}\n",
    ),
    (
        "sub-byte array packed at E(2^63 - 1) bits (elements x bits overflowed)",
        "HloModule m\nENTRY e {\n  a = f4e2m1fn[80,20]{1,0:E(9223372036854775807)} parameter(0)\n  ROOT n = f4e2m1fn[80,20]{1,0:E(9223372036854775807)} negate(a)\n}\n",
    ),
    (
        "gather of a collapsed dim with slice size 0 (the start clamped past the end)",
        "HloModule m\nENTRY e {\n  x = f32[5,7] parameter(0)\n  i = s32[6,2] parameter(1)\n  ROOT g = f32[6,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={0,3}\n}\n",
    ),
    (
        "convolution with a window of 2^31 positions (counted pair by pair: a hang)",
        "HloModule m\nENTRY e {\n  x = f32[1,2147483648,1] parameter(0)\n  k = f32[2147483647,1,1] parameter(1)\n  ROOT c = f32[1,2,1] convolution(x, k), window={size=2147483647}, dim_labels=b0f_0io->b0f\n}\n",
    ),
];

#[test]
fn found_crashes_stay_fixed() {
    for (k, (what, text)) in REGRESSIONS.iter().enumerate() {
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| pipeline(text, k)));
        assert!(r.is_ok(), "{what}: panicked");
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: took {:?}",
            t.elapsed()
        );
    }
}
