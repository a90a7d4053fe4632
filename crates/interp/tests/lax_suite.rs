//! The generated differential suite over the `jax.lax` operator surface:
//! every case in testdata/lax_suite/<family>.txt (elementwise ops, converts
//! and bitcasts, reductions, cumulative ops, dots, convs, windows, data
//! movement, indexing, sort/top_k, control flow, each crossed with the dtypes
//! the op accepts, special values and scalar/empty/odd shapes) runs its
//! pre-optimization HLO through the interpreter and is compared with the
//! result JAX on CPU computed, by the rules of tests/dtypes.rs (common/compare.rs):
//! integers, pred and narrow floats bit-exact, NaN matching any NaN, a few ulp
//! for f32/f64/complex.
//!
//! testdata/lax_suite/known_differences.txt lists every case that differs,
//! each with its kind and reason: `artifact` (XLA:CPU's result is an artifact
//! of how it computes, not of XLA's semantics: flush-to-zero, FMA
//! contraction, fast approximations) or `bug` (an open interpreter bug). The
//! test fails if an unlisted case differs, if a listed case stops differing
//! (so the list stays exact) or if an entry is still `unreviewed`.
//!
//! Regenerate the cases: `python tools/gen_cases/lax_suite.py` (JAX, numpy,
//! ml_dtypes; deterministic). Bless the list from the current results:
//! `TPUSIM_BLESS=1 cargo test -p tpusim-interp --test lax_suite`, which keeps
//! the entries that still differ, drops the others and adds new differences
//! as `unreviewed` with their first mismatch, to be given a kind and reason.

mod common;

use common::compare::mismatch;
use half::{bf16, f16};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tpusim_hlo::{PrimitiveType as T, Shape};
use tpusim_interp::value::{wrap_signed, wrap_unsigned};
use tpusim_interp::{Array, Data, Value};

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/lax_suite")
}

/// One generated case: its name, argument and result lines, and HLO text.
struct Case {
    name: String,
    ins: Vec<String>,
    outs: Vec<String>,
    hlo: String,
}

fn read_cases() -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(suite_dir())
        .expect("testdata/lax_suite")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .filter(|p| !p.ends_with("known_differences.txt"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for f in files {
        let family = f
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&f).expect("suite file");
        for block in text.split("\ncase ").skip(1) {
            let mut lines = block.lines();
            let name = format!("{family}/{}", lines.next().unwrap_or_default().trim());
            let (mut ins, mut outs, mut hlo) = (Vec::new(), Vec::new(), String::new());
            for l in lines {
                if let Some(r) = l.strip_prefix("in ") {
                    ins.push(r.to_string());
                } else if let Some(r) = l.strip_prefix("out ") {
                    outs.push(r.to_string());
                } else {
                    hlo.push_str(l);
                    hlo.push('\n');
                }
            }
            cases.push(Case {
                name,
                ins,
                outs,
                hlo,
            });
        }
    }
    cases
}

/// An array of `shape` from a line `<type>[dims] <hex bits>...`.
fn decode(line: &str, shape: &Shape) -> Result<Array, String> {
    let a = shape.as_array().ok_or("tuple-shaped value")?;
    let mut words = line.split_ascii_whitespace();
    let head = words.next().unwrap_or_default();
    let dims: Vec<usize> = a.dims.iter().map(|&d| d.max(0) as usize).collect();
    let want_head = format!(
        "{}[{}]",
        a.ty.name(),
        dims.iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    if head != want_head {
        return Err(format!("stored {head}, module has {want_head}"));
    }
    let bits: Vec<u128> = words
        .map(|w| u128::from_str_radix(w, 16).map_err(|e| format!("{w}: {e}")))
        .collect::<Result<_, _>>()?;
    if bits.len() != dims.iter().product::<usize>() {
        return Err(format!("{} elements for {want_head}", bits.len()));
    }
    let width = a.ty.bit_width();
    let data = match a.ty {
        T::Pred => Data::Pred(bits.iter().map(|&b| b != 0).collect()),
        T::F32 => Data::F32(bits.iter().map(|&b| f32::from_bits(b as u32)).collect()),
        T::F64 => Data::F64(bits.iter().map(|&b| f64::from_bits(b as u64)).collect()),
        T::Bf16 => Data::Bf16(bits.iter().map(|&b| bf16::from_bits(b as u16)).collect()),
        T::F16 => Data::F16(bits.iter().map(|&b| f16::from_bits(b as u16)).collect()),
        T::C64 => Data::C64(
            bits.iter()
                .map(|&b| (f32::from_bits((b >> 32) as u32), f32::from_bits(b as u32)))
                .collect(),
        ),
        T::C128 => Data::C128(
            bits.iter()
                .map(|&b| (f64::from_bits((b >> 64) as u64), f64::from_bits(b as u64)))
                .collect(),
        ),
        ty if ty.is_signed_int() => Data::I64(
            bits.iter()
                .map(|&b| wrap_signed(b as u64 as i64, width))
                .collect(),
        ),
        ty if ty.is_unsigned_int() => Data::U64(
            bits.iter()
                .map(|&b| wrap_unsigned(b as u64, width))
                .collect(),
        ),
        ty if ty.is_float() => Data::F8(bits.iter().map(|&b| b as u8).collect()),
        ty => return Err(format!("element type {ty}")),
    };
    Ok(Array::new(a.ty, dims, data))
}

/// `a` with its subnormal f16/bf16/f32/f64 (and c64/c128 component) values
/// replaced by zeros of the same sign, as XLA:CPU's flush-to-zero mode reads
/// and writes them.
fn flush(a: &Array) -> Array {
    fn f32s(x: f32) -> f32 {
        if x.is_subnormal() {
            0.0f32.copysign(x)
        } else {
            x
        }
    }
    fn f64s(x: f64) -> f64 {
        if x.is_subnormal() {
            0.0f64.copysign(x)
        } else {
            x
        }
    }
    let data = match &a.data {
        Data::F32(v) => Data::F32(v.iter().map(|&x| f32s(x)).collect()),
        Data::F64(v) => Data::F64(v.iter().map(|&x| f64s(x)).collect()),
        Data::C64(v) => Data::C64(v.iter().map(|&(r, i)| (f32s(r), f32s(i))).collect()),
        Data::C128(v) => Data::C128(v.iter().map(|&(r, i)| (f64s(r), f64s(i))).collect()),
        Data::Bf16(v) => Data::Bf16(
            v.iter()
                .map(|&x| bf16::from_f32(f32s(x.to_f32())))
                .collect(),
        ),
        Data::F16(v) => Data::F16(
            v.iter()
                .map(|&x| {
                    let v = x.to_f32();
                    if v != 0.0 && v.abs() < f16::MIN_POSITIVE.to_f32() {
                        f16::from_f32(0.0f32.copysign(v))
                    } else {
                        x
                    }
                })
                .collect(),
        ),
        d => d.clone(),
    };
    Array::new(a.ty, a.dims.clone(), data)
}

/// Runs one case: `None` when it matches JAX, else the first difference.
/// With `daz`, subnormal arguments and results are flushed to zero first.
fn run(case: &Case) -> Option<String> {
    run_mode(case, false)
}

fn run_mode(case: &Case, daz: bool) -> Option<String> {
    let m = match tpusim_hlo::parse_module(&case.hlo) {
        Ok(m) => m,
        Err(e) => return Some(format!("parse: {e:?}")),
    };
    if let Err(errs) = tpusim_hlo::verify(&m) {
        return Some(format!("verifier: {:?}", errs.first()));
    }
    let params = m.entry_parameter_shapes();
    if params.len() != case.ins.len() {
        return Some(format!(
            "{} inputs for {} parameters",
            case.ins.len(),
            params.len()
        ));
    }
    let mut args = Vec::new();
    for (k, (line, shape)) in case.ins.iter().zip(&params).enumerate() {
        match decode(line, shape) {
            Ok(a) if daz => args.push(Value::Array(flush(&a))),
            Ok(a) => args.push(Value::Array(a)),
            Err(e) => return Some(format!("in{k}: {e}")),
        }
    }
    let leaves = m.instr(m.entry().root).shape.leaves();
    if leaves.len() != case.outs.len() {
        return Some(format!(
            "{} outputs for {} leaves",
            case.outs.len(),
            leaves.len()
        ));
    }
    let got = match tpusim_interp::execute(&m, args) {
        Ok(g) => g,
        Err(e) => return Some(format!("execute: {e}")),
    };
    for (k, ((line, leaf), g)) in case.outs.iter().zip(leaves).zip(&got).enumerate() {
        let want = match decode(line, &Shape::Array(leaf.clone())) {
            Ok(w) => w,
            Err(e) => return Some(format!("out{k}: {e}")),
        };
        let Value::Array(g) = g else {
            return Some(format!("out{k}: tuple leaf"));
        };
        let g = if daz { &flush(g) } else { g };
        if let Some(e) = mismatch(g, &want) {
            return Some(format!("out{k} ({}): {e}", want.ty));
        }
    }
    None
}

/// The known differences: case -> (kind, reason).
fn known() -> BTreeMap<String, (String, String)> {
    let text =
        std::fs::read_to_string(suite_dir().join("known_differences.txt")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (kind, rest) = l.split_once(' ')?;
            let (case, reason) = rest.split_once(": ")?;
            Some((case.to_string(), (kind.to_string(), reason.to_string())))
        })
        .collect()
}

const HEADER: &str = "\
# Cases of testdata/lax_suite where the interpreter and XLA:CPU differ, one a line:
#   <kind> <family>/<case>: <reason>
# kind: `artifact` (XLA:CPU's result is an artifact of how it computes, not
# XLA's semantics), `bug` (an open interpreter bug) or `unreviewed` (added by
# TPUSIM_BLESS=1 with its first mismatch; give it a kind and a reason).
# Checked by crates/interp/tests/lax_suite.rs: every differing case must be
# listed here and every listed case must differ.
";

#[test]
fn lax_suite_matches_jax() {
    let cases = read_cases();
    assert!(
        cases.len() >= 2000,
        "lax_suite cases missing: {}",
        cases.len()
    );
    let known = known();
    let mut differ = BTreeMap::new();
    for c in &cases {
        if let Some(e) = run(c) {
            differ.insert(c.name.clone(), e);
        }
    }
    let count = |kind: &str| {
        differ
            .keys()
            .filter(|c| known.get(*c).is_some_and(|(k, _)| k == kind))
            .count()
    };
    eprintln!(
        "lax_suite: {} cases, {} pass, {} known XLA:CPU artifacts, {} open bugs, {} unlisted differences",
        cases.len(),
        cases.len() - differ.len(),
        count("artifact"),
        count("bug"),
        differ.keys().filter(|c| !known.contains_key(*c)).count()
    );
    if std::env::var_os("TPUSIM_BLESS").is_some() {
        let mut out = HEADER.to_string();
        for (case, e) in &differ {
            let (kind, reason) = known.get(case).cloned().unwrap_or_else(|| {
                let c = cases.iter().find(|c| &c.name == case).expect("case");
                let note = if run_mode(c, true).is_none() {
                    "(matches once subnormal arguments and results are flushed to zero) "
                } else {
                    ""
                };
                ("unreviewed".into(), format!("{note}{e}"))
            });
            out.push_str(&format!("{kind} {case}: {reason}\n"));
        }
        std::fs::write(suite_dir().join("known_differences.txt"), out).expect("bless");
        eprintln!("blessed testdata/lax_suite/known_differences.txt");
        return;
    }
    let mut failures = Vec::new();
    for (case, e) in &differ {
        match known.get(case).map(|(k, _)| k.as_str()) {
            None => failures.push(format!("{case}: {e}")),
            Some("unreviewed") => failures.push(format!("{case}: unreviewed: {e}")),
            Some("artifact" | "bug") => {}
            Some(k) => failures.push(format!("{case}: unknown kind '{k}'")),
        }
    }
    for case in known.keys().filter(|c| !differ.contains_key(*c)) {
        failures.push(format!(
            "{case}: listed in known_differences.txt but matches JAX (or no such case); remove it"
        ));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
