//! Robustness of the HLO parser: it must never panic, never hang, never
//! overflow the stack and never allocate in proportion to a declared size, on
//! any input. Whatever it accepts must print to text that parses again and
//! prints identically.
//!
//! `mutated_corpus_never_panics` is a seeded property test over random
//! mutations of small corpus files; it runs in CI (`cargo test`). For a longer
//! local run: `TPUSIM_ROBUSTNESS_CASES=100000 TPUSIM_ROBUSTNESS_SEED=7 cargo
//! test -p tpusim-hlo --release --test robustness`. The libFuzzer target in
//! `fuzz/` checks the same properties on arbitrary bytes.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use tpusim_hlo::error::line_col;
use tpusim_hlo::parser::MAX_DEPTH;
use tpusim_hlo::{parse_module, parse_modules, print_module, ParseError};

// ----- allocation accounting ---------------------------------------------------

/// Records the largest single allocation made by the current thread, so tests
/// can check that absurd declared sizes are rejected without being allocated.
struct LargestAlloc;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

unsafe impl GlobalAlloc for LargestAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: LargestAlloc = LargestAlloc;

/// Runs `f` and returns its result with the largest single allocation it made.
fn largest_alloc_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let r = f();
    (r, LARGEST.with(|l| l.get()))
}

// ----- shared checks ---------------------------------------------------------------

/// Parses `text`; on success, checks that printing is a fixpoint; on failure,
/// checks that the error points into the source and renders with its position.
/// Returns the error, if any.
fn check(text: &str) -> Option<ParseError> {
    match parse_modules(text) {
        Ok(modules) => {
            for m in &modules {
                let printed = print_module(m);
                let reparsed = parse_module(&printed).unwrap_or_else(|e| {
                    panic!(
                        "printed module does not parse again:\n{}\n--- input ---\n{text}\n\
                         --- printed ---\n{printed}",
                        e.render("<printed>", &printed)
                    )
                });
                let again = print_module(&reparsed);
                assert_eq!(
                    printed, again,
                    "print is not a fixpoint\n--- input ---\n{text}"
                );
            }
            None
        }
        Err(e) => {
            assert!(
                e.offset <= text.len(),
                "error offset {} is past the end ({} bytes): {e}",
                e.offset,
                text.len()
            );
            assert!(!e.message.is_empty());
            let rendered = e.render("in.hlo", text);
            let (line, col) = line_col(text, e.offset);
            let loc = format!("in.hlo:{line}:{col}");
            assert!(
                rendered.contains(&loc),
                "rendered error lacks {loc}:\n{rendered}"
            );
            assert!(rendered.contains(&e.message), "{rendered}");
            Some(e)
        }
    }
}

/// Runs `f` on a thread with a 2 MiB stack (the default for spawned threads),
/// so a recursion that the depth limit fails to bound overflows here too.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

fn expect_err(text: &str) -> ParseError {
    check(text).unwrap_or_else(|| panic!("expected an error for:\n{text}"))
}

fn module_with(body: &str) -> String {
    format!("HloModule m\n\nENTRY e {{\n{body}\n}}\n")
}

// ----- corpus ------------------------------------------------------------------------

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/corpus")
}

fn collect_hlo(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_hlo(&p, out);
        } else if p.extension().is_some_and(|x| x == "hlo") {
            out.push(p);
        }
    }
}

/// Corpus files under 20 KB, in a fixed (sorted) order.
fn small_corpus() -> Vec<(String, String)> {
    let mut paths = Vec::new();
    collect_hlo(&corpus_dir(), &mut paths);
    paths.sort();
    let files: Vec<_> = paths
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            (text.len() < 20_000).then(|| (p.display().to_string(), text))
        })
        .collect();
    assert!(
        files.len() >= 20,
        "too few corpus files under {}",
        corpus_dir().display()
    );
    files
}

#[test]
fn corpus_files_round_trip() {
    for (path, text) in small_corpus() {
        if let Some(e) = check(&text) {
            panic!("corpus file does not parse:\n{}", e.render(&path, &text));
        }
    }
}

// ----- mutations ---------------------------------------------------------------------

/// Fragments that are likely to steer the parser somewhere interesting.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    "=",
    "%",
    ":",
    "-",
    "\"",
    "0",
    "1",
    "7",
    "-1",
    "99999999999",
    "18446744073709551616",
    "1e400",
    "nan",
    "-inf",
    "...",
    "->",
    "<=",
    "?",
    "/*",
    "*/",
    "//",
    "\n",
    " ",
    "\\",
    "\0",
    "f32[]",
    "f32[2,3]{1,0}",
    "(f32[], s32[])",
    "b(",
    "pred",
    "u64",
    "c64",
    "token[]",
    "ROOT ",
    "ENTRY ",
    "HloModule m\n",
    "parameter(0)",
    "constant(",
    "add(",
    "tuple(",
    "while(",
    "all-reduce-start(",
    ", to_apply=",
    ", sharding=",
    ", window={size=",
    ", dimensions={",
    ", metadata={",
    ", backend_config=",
    ", replica_groups=",
    "devices=[2,1]<=[2]",
    "{maximal device=0}",
    "b01f_01io->b01f",
    "0_0x1_1",
    "3x3",
    "T(8,128)",
    ":T(",
    "\u{fffd}",
    "é",
];

#[derive(Clone, Debug)]
enum Mutation {
    FlipBits(Index, u8),
    SetByte(Index, u8),
    Delete(Index, usize),
    InsertToken(Index, usize),
    Truncate(Index),
    Duplicate(Index, usize, Index),
    Swap(Index, Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => (any::<Index>(), 1..=255u8).prop_map(|(i, m)| Mutation::FlipBits(i, m)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        1 => (any::<Index>(), 1..64usize).prop_map(|(i, n)| Mutation::Delete(i, n)),
        3 => (any::<Index>(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::InsertToken(i, t)),
        1 => (any::<Index>()).prop_map(Mutation::Truncate),
        1 => (any::<Index>(), 1..256usize, any::<Index>())
            .prop_map(|(a, n, b)| Mutation::Duplicate(a, n, b)),
        1 => (any::<Index>(), any::<Index>(), 1..16usize).prop_map(|(a, b, n)| Mutation::Swap(a, b, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len) };
    let len = bytes.len();
    match m {
        Mutation::FlipBits(i, mask) if len > 0 => bytes[at(i, len)] ^= mask,
        Mutation::SetByte(i, b) if len > 0 => bytes[at(i, len)] = *b,
        Mutation::Delete(i, n) if len > 0 => {
            let s = at(i, len);
            bytes.drain(s..(s + n).min(len));
        }
        Mutation::InsertToken(i, t) => {
            let s = at(i, len + 1);
            bytes.splice(s..s, TOKENS[*t].bytes());
        }
        Mutation::Truncate(i) => bytes.truncate(at(i, len + 1)),
        Mutation::Duplicate(a, n, b) if len > 0 => {
            let s = at(a, len);
            let span = bytes[s..(s + n).min(len)].to_vec();
            let d = at(b, len + 1);
            bytes.splice(d..d, span);
        }
        Mutation::Swap(a, b, n) if len > 0 => {
            let (x, y) = (at(a, len), at(b, len));
            let n = (*n).min(len - x).min(len - y);
            for k in 0..n {
                bytes.swap(x + k, y + k);
            }
        }
        _ => {}
    }
}

fn cases() -> u32 {
    let default = if cfg!(debug_assertions) { 4000 } else { 40000 };
    std::env::var("TPUSIM_ROBUSTNESS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("TPUSIM_ROBUSTNESS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0070_7573_696d)
}

#[test]
fn mutated_corpus_never_panics() {
    let files = small_corpus();
    let n = files.len();
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed().to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let strategy = (0..n, prop::collection::vec(mutation(), 1..8));
    let (parsed, errors) = (Cell::new(0usize), Cell::new(0usize));
    let result = runner.run(&strategy, |(file, muts)| {
        let mut bytes = files[file].1.clone().into_bytes();
        for m in &muts {
            apply(&mut bytes, m);
        }
        let text = String::from_utf8_lossy(&bytes);
        let limit = (1 << 20) + 64 * text.len();
        let (err, largest) = largest_alloc_during(|| check(&text));
        let tally = if err.is_some() { &errors } else { &parsed };
        tally.set(tally.get() + 1);
        if largest > limit {
            return Err(TestCaseError::fail(format!(
                "parsing {} bytes made a {largest}-byte allocation",
                text.len()
            )));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!(
        "mutated corpus: {} inputs parsed and round-tripped, {} rejected with an error",
        parsed.get(),
        errors.get()
    );
    // Mutations that never produce a valid module would test only error paths.
    assert!(parsed.get() > 0 && errors.get() > 0);
}

// ----- absurd inputs -----------------------------------------------------------------

#[test]
fn huge_dimensions_are_rejected_with_their_size() {
    let text = module_with("  ROOT p = f32[99999999999,99999999999] parameter(0)");
    let (e, largest) = largest_alloc_during(|| expect_err(&text));
    assert!(e.message.contains("too large"), "{e}");
    assert!(e.message.contains("99999999999,99999999999"), "{e}");
    assert!(largest < 1 << 20, "allocated {largest} bytes");
    // Each dimension fits, the product overflows even i128 arithmetic on the way.
    let dims = ["9223372036854775807"; 8].join(",");
    let e = expect_err(&module_with(&format!("  ROOT p = s8[{dims}] parameter(0)")));
    assert!(e.message.contains("too large"), "{e}");
}

#[test]
fn huge_constant_is_rejected_without_allocating() {
    for body in [
        "  ROOT c = f32[1000000000000] constant({1})",
        "  ROOT c = f32[1000000000000,1000000] constant({{1}})",
        "  ROOT c = (f32[1000000000000], s32[]) constant(({1}, 2))",
        "  ROOT c = pred[999999999999999] constant({})",
        "  ROOT c = u8[1000000000000] constant({...})",
    ] {
        let text = module_with(body);
        let (r, largest) = largest_alloc_during(|| check(&text));
        assert!(largest < 1 << 20, "{body}: allocated {largest} bytes");
        // `{...}` (elided) is valid; the others have the wrong element count.
        if !body.contains("...") {
            let e = r.unwrap_or_else(|| panic!("{body} parsed"));
            assert!(e.message.contains("elements"), "{body}: {e}");
        }
    }
}

#[test]
fn huge_parameter_number_is_rejected_without_allocating() {
    let text = module_with("  ROOT p = f32[] parameter(1048575)");
    let (e, largest) = largest_alloc_during(|| expect_err(&text));
    assert!(e.message.contains("parameter"), "{e}");
    assert!(largest < 1 << 20, "allocated {largest} bytes");
    let e = expect_err(&module_with("  ROOT p = f32[] parameter(-1)"));
    assert!(e.message.contains("parameter"), "{e}");
}

const DEEP: usize = 10_000;

/// Asserts `text` fails with the nesting-depth error, on a small stack.
fn assert_nesting_error(what: &'static str, text: String) {
    let e = on_small_stack(move || expect_err(&text));
    assert!(
        e.message.contains("nest"),
        "{what}: expected a nesting error, got: {e}"
    );
}

#[test]
fn deep_tuple_shape_is_a_nesting_error() {
    let shape = format!("{}f32[]{}", "(".repeat(DEEP), ")".repeat(DEEP));
    assert_nesting_error(
        "tuple shape",
        module_with(&format!("  ROOT p = {shape} parameter(0)")),
    );
    // Unclosed, and inside an operand list.
    assert_nesting_error(
        "unclosed tuple shape",
        module_with(&format!("  ROOT p = {}", "(".repeat(DEEP))),
    );
    assert_nesting_error(
        "operand shape",
        module_with(&format!(
            "  p = f32[] parameter(0)\n  ROOT n = f32[] negate({}",
            "(".repeat(DEEP)
        )),
    );
    // Buffer shapes `b(b(b(...)))`.
    assert_nesting_error(
        "buffer shape",
        module_with(&format!(
            "  ROOT p = {}f32[]{} parameter(0)",
            "b(".repeat(DEEP),
            ")".repeat(DEEP)
        )),
    );
    // Physical shapes in layouts: `f32[1]{0:P(f32[1]{0:P(...`.
    assert_nesting_error(
        "physical shape",
        module_with(&format!(
            "  ROOT p = {} parameter(0)",
            "f32[1]{0:P(".repeat(DEEP)
        )),
    );
}

#[test]
fn deep_literal_is_a_nesting_error() {
    let open = "{".repeat(DEEP);
    assert_nesting_error(
        "rank-1 literal",
        module_with(&format!("  ROOT c = f32[1] constant({open}1")),
    );
    // A tuple literal nested as deep as its (deep) shape.
    let shape = format!("{}f32[]{}", "(".repeat(DEEP), ")".repeat(DEEP));
    assert_nesting_error(
        "tuple literal",
        module_with(&format!(
            "  ROOT c = {shape} constant({}1{})",
            "(".repeat(DEEP),
            ")".repeat(DEEP)
        )),
    );
    // A shape of rank 300 (allowed) needs a literal nested 300 deep (refused).
    let dims = vec!["1"; 300].join(",");
    assert_nesting_error(
        "rank-300 literal",
        module_with(&format!(
            "  ROOT c = f32[{dims}] constant({}1{})",
            "{".repeat(300),
            "}".repeat(300)
        )),
    );
}

#[test]
fn deep_braces_in_attributes_do_not_overflow() {
    // Raw values are scanned iteratively; deep but balanced braces are fine,
    // unbalanced ones are an error.
    for attr in [
        "backend_config",
        "frontend_attributes",
        "sharding",
        "metadata",
        "unknown_attr",
        "dimensions",
        "window",
        "replica_groups",
        "slice",
    ] {
        let text = module_with(&format!(
            "  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p), {attr}={}",
            "{".repeat(DEEP)
        ));
        on_small_stack(move || {
            expect_err(&text);
        });
    }
    let balanced = format!("{}{}", "{".repeat(DEEP), "}".repeat(DEEP));
    let text = module_with(&format!(
        "  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p), backend_config={balanced}"
    ));
    on_small_stack(move || assert!(check(&text).is_none()));
}

#[test]
fn deep_nested_operands_are_a_nesting_error() {
    let text = module_with(&format!(
        "  ROOT r = f32[] {}constant(1){}",
        "negate(f32[] ".repeat(DEEP),
        ")".repeat(DEEP)
    ));
    assert_nesting_error("nested operands", text);
    // Nesting just under the limit still parses, and prints as flat instructions.
    let ok = module_with(&format!(
        "  ROOT r = f32[] {}constant(1){}",
        "negate(f32[] ".repeat(MAX_DEPTH / 2 - 2),
        ")".repeat(MAX_DEPTH / 2 - 2)
    ));
    on_small_stack(move || assert_eq!(check(&ok).map(|e| e.render("ok", &ok)), None));
}

#[test]
fn deep_shapes_under_the_limit_parse_on_a_small_stack() {
    // The deepest input of each kind that is accepted must fit in a 2 MiB
    // stack in a debug build (a physical shape counts as 4 levels).
    let accepted = |what: &'static str, text: String| {
        let r = on_small_stack(move || check(&text).map(|e| e.render("deep.hlo", &text)));
        assert_eq!(r, None, "{what}");
    };
    let n = MAX_DEPTH - 2;
    accepted(
        "tuple shape",
        module_with(&format!(
            "  ROOT p = {}f32[]{} parameter(0)",
            "(".repeat(n),
            ")".repeat(n)
        )),
    );
    let n = MAX_DEPTH / 4 - 1;
    accepted(
        "physical shape",
        module_with(&format!(
            "  ROOT p = {}f32[1]{{0}}{} parameter(0)",
            "f32[1]{0:P(".repeat(n),
            ")}".repeat(n)
        )),
    );
    let n = MAX_DEPTH - 3;
    accepted(
        "literal",
        module_with(&format!(
            "  ROOT c = f32[{}] constant({}1{})",
            vec!["1"; n].join(","),
            "{".repeat(n),
            "}".repeat(n)
        )),
    );
}

// ----- odd bytes -----------------------------------------------------------------------

#[test]
fn empty_and_trivial_inputs() {
    for text in [
        "",
        " ",
        "\n\n\n",
        "// just a comment",
        "/* unterminated",
        "HloModule",
        "HloModule ",
        "HloModule m",
        "HloModule m,",
        "HloModule m, is_scheduled=",
        "HloModule m\nENTRY",
        "HloModule m\nENTRY e {",
        "HloModule m\nENTRY e {}",
        "HloModule m\nENTRY e { ROOT",
        "ENTRY",
        "{",
        "}",
        "\"",
        "%",
        "-",
        ".",
        "?",
    ] {
        let e = expect_err(text);
        assert!(!e.message.is_empty(), "{text:?}");
    }
    let e = expect_err("");
    assert!(e.message.contains("no computations"), "{e}");
    let e = expect_err("HloModule");
    assert!(e.message.contains("end of input"), "{e}");
}

#[test]
fn nul_bytes_are_rejected() {
    let good = module_with("  ROOT p = f32[] parameter(0)");
    for i in 0..=good.len() {
        let mut text = good.clone();
        text.insert(i, '\0');
        check(&text);
    }
    let e = expect_err("HloModule m\0\nENTRY e { ROOT p = f32[] parameter(0) }");
    assert!(e.message.contains("NUL"), "{e}");
    let e = expect_err(&module_with(
        "  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p), backend_config={\0}",
    ));
    assert!(e.message.contains("NUL"), "{e}");
}

#[test]
fn invalid_utf8_is_rejected() {
    let good = module_with("  ROOT p = f32[] parameter(0)").into_bytes();
    for bad in [&[0xffu8][..], &[0xc3], &[0xe2, 0x82], &[0xf0, 0x9f, 0x98]] {
        for i in [0, 10, 20, good.len() - 2, good.len()] {
            let mut bytes = good.clone();
            bytes.splice(i..i, bad.iter().copied());
            let text = String::from_utf8_lossy(&bytes);
            if let Some(e) = check(&text) {
                assert!(
                    e.message.contains("unexpected character"),
                    "{e}\n{}",
                    e.render("x", &text)
                );
            }
        }
    }
    // Non-ASCII inside strings and comments is fine.
    assert!(check(&module_with(
        "  // héllo ☃\n  ROOT p = f32[] parameter(0), metadata={op_name=\"☃\"}"
    ))
    .is_none());
}

/// Parses and checks `text`, failing if it takes unreasonably long. The bound
/// is loose (CI machines are slow and busy): linear parsing of these inputs
/// takes well under a second in release, while the quadratic duplicate-attribute
/// check and did-you-mean search that these tests caught took 10 to 40 s.
fn check_fast(what: &str, text: &str) {
    let t0 = std::time::Instant::now();
    check(text);
    let took = t0.elapsed();
    assert!(
        took < std::time::Duration::from_secs(if cfg!(debug_assertions) { 30 } else { 10 }),
        "{what}: parsing {} bytes took {took:?}",
        text.len()
    );
}

#[test]
fn long_tokens_do_not_hang() {
    let long = "x".repeat(if cfg!(debug_assertions) {
        1 << 18
    } else {
        1 << 20
    });
    // An unknown opcode of 1 MiB: the did-you-mean search must stay cheap.
    check_fast(
        "long opcode",
        &module_with(&format!("  ROOT p = f32[] {long}(0)")),
    );
    let e = expect_err(&module_with(&format!("  ROOT p = f32[] {long}(0)")));
    assert!(e.message.starts_with("unknown opcode"));
    let n = if cfg!(debug_assertions) {
        1 << 13
    } else {
        1 << 16
    };
    let many = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<String>();
    for (what, text) in [
        (
            "long integer",
            module_with(&format!("  ROOT p = f32[] parameter({})", "9".repeat(1 << 20))),
        ),
        (
            "unterminated string",
            module_with(&format!(
                "  ROOT p = f32[] parameter(0), metadata={{op_name=\"{long}"
            )),
        ),
        (
            "unterminated comment",
            module_with(&format!("  ROOT p = f32[] parameter(0) /* {long}")),
        ),
        (
            "many comments",
            module_with(&format!("{}  ROOT p = f32[] parameter(0)", "//\n/**/".repeat(n))),
        ),
        (
            "rank 2^18",
            module_with(&format!("  ROOT p = f32[{}] parameter(0)", "1,".repeat(1 << 18))),
        ),
        (
            "many attributes",
            module_with(&format!(
                "  ROOT p = f32[] parameter(0){}",
                many(&|i| format!(", a{i}=1"))
            )),
        ),
        (
            "many module attributes",
            format!(
                "HloModule m{}\nENTRY e {{ ROOT p = f32[] parameter(0) }}",
                many(&|i| format!(", a{i}=1"))
            ),
        ),
        (
            "many window fields",
            module_with(&format!(
                "  ROOT p = f32[] parameter(0), window={{{}}}",
                "size=".repeat(n)
            )),
        ),
        (
            "many instructions",
            module_with(&format!(
                "  a0 = f32[] parameter(0)\n{}  ROOT r = f32[] negate(a{})",
                many(&|i| format!("  a{} = f32[] negate(a{i})\n", i + 1)),
                n
            )),
        ),
        (
            "many operands",
            module_with(&format!(
                "  p = f32[] parameter(0)\n  ROOT t = {} tuple(p{})",
                format_args!("({})", vec!["f32[]"; n + 1].join(",")),
                ", p".repeat(n)
            )),
        ),
        (
            "many parameters",
            module_with(&format!(
                "{}  ROOT r = f32[] parameter({n})",
                many(&|i| format!("  p{i} = f32[] parameter({i})\n"))
            )),
        ),
        (
            "many computations",
            format!(
                "HloModule m\nc0 {{ ROOT p = f32[] parameter(0) }}\n{}ENTRY e {{ ROOT p = f32[] parameter(0) }}",
                many(&|i| format!(
                    "c{} {{ p = f32[] parameter(0)\n ROOT r = f32[] call(p), to_apply=c{i} }}\n",
                    i + 1
                ))
            ),
        ),
        (
            "many modules",
            many(&|i| format!("HloModule m{i}\nENTRY e {{ ROOT p = f32[] parameter(0) }}\n")),
        ),
        (
            "long literal",
            module_with(&format!(
                "  ROOT c = s32[{n}] constant({{{}0}})",
                "1,".repeat(n - 1)
            )),
        ),
        (
            "long frontend attributes",
            module_with(&format!(
                "  ROOT p = f32[] parameter(0), frontend_attributes={{{}z=\"\"}}",
                many(&|i| format!("k{}=\"v\",", n - i))
            )),
        ),
        (
            "many control predecessors",
            module_with(&format!(
                "{}  ROOT r = f32[] parameter({n}), control-predecessors={{{}}}",
                many(&|i| format!("  p{i} = f32[] parameter({i})\n")),
                (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>().join(",")
            )),
        ),
        (
            "long explicit device list",
            module_with(&format!(
                "  ROOT p = f32[] parameter(0), sharding={{devices=[{n}]{}}}",
                (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
            )),
        ),
        (
            "huge iota sharding",
            module_with(
                "  ROOT p = f32[16777216] parameter(0), sharding={devices=[16777216]<=[16777216]}",
            ),
        ),
    ] {
        check_fast(what, &text);
    }
}

// ----- fuzzer finds ------------------------------------------------------------------

/// Inputs the fuzzer found; each must parse and print to a fixpoint.
#[test]
fn fuzz_regressions() {
    for text in [
        // A parameter name that starts with digits was printed bare in the
        // program shape, `(999input: f32[])`, which lexes as an integer.
        "HloModule m\nENTRY e {\n  %999input = f32[] parameter(0)\n}\n",
        "HloModule m\nENTRY e {\n  %0 = f32[] parameter(0)\n  %-1 = f32[] parameter(1)\n  \
         ROOT %.5 = f32[] add(%0, %-1)\n}\n",
        // The same for module names, and module names that are keywords.
        "HloModule %0\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n",
        "HloModule %ENTRY\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n",
        "HloModule %nan\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n",
        "HloModule %-x\nENTRY e {\n  ROOT %nan = f32[] parameter(0)\n}\n",
    ] {
        if let Some(e) = check(text) {
            panic!("{}", e.render("fuzz.hlo", text));
        }
    }
    // Errors whose message must render verbatim (`check` asserts it).
    for text in [
        // A control byte after a backslash was put raw into the message.
        "HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0), metadata={op_name=\"a\\\u{2}b\"}\n}\n",
        "HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0), metadata={op_name=\"a\\\u{e9}b\"}\n}\n",
    ] {
        let e = expect_err(text);
        assert!(e.message.contains("unknown escape"), "{e}");
    }
}
