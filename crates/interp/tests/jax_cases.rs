//! Runs every reference case in testdata/corpus/jax_cases (pre.hlo and post.hlo) on its
//! inputs.npz and compares with outputs.npz. Cases listed in expected_failures.txt must
//! fail with an "unsupported"/"not supported" error; every other case must pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tpusim_hlo::{Opcode, PrimitiveType as T, Shape};
use tpusim_interp::{npz, Data, Value};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/corpus/jax_cases")
}

fn expected_failures() -> BTreeMap<String, String> {
    let text = include_str!("expected_failures.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, why) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            (k.to_string(), why.trim().to_string())
        })
        .collect()
}

/// Orders float bit patterns so that adjacent values differ by one.
fn ordered(bits: i64, width: u32) -> i64 {
    let sign = 1i64 << (width - 1);
    if bits & sign != 0 {
        -(bits & (sign - 1))
    } else {
        bits
    }
}

fn compare(got: &Value, want: &Value, rtol: f64) -> Result<(), String> {
    let (g, w) = (got.as_array().unwrap(), want.as_array().unwrap());
    if g.ty != w.ty || g.dims != w.dims {
        return Err(format!(
            "got {}{:?}, want {}{:?}",
            g.ty, g.dims, w.ty, w.dims
        ));
    }
    match (&g.data, &w.data) {
        (Data::F32(_), _) | (Data::F64(_), _) => {
            let (a, b) = (g.to_f64s(), w.to_f64s());
            let scale = b.iter().fold(0f64, |m, x| m.max(x.abs()));
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                let same_nan = x.is_nan() && y.is_nan();
                let ok = same_nan || x == y || (x - y).abs() <= rtol * y.abs().max(1e-3 * scale);
                if !ok {
                    return Err(format!("element {i}: got {x}, want {y} (rtol {rtol})"));
                }
            }
            Ok(())
        }
        (Data::Bf16(a), Data::Bf16(b)) => {
            ulps(a.iter().map(|x| x.to_bits()), b.iter().map(|x| x.to_bits()))
        }
        (Data::F16(a), Data::F16(b)) => {
            ulps(a.iter().map(|x| x.to_bits()), b.iter().map(|x| x.to_bits()))
        }
        _ if g.data == w.data => Ok(()),
        _ => Err(format!(
            "values differ: got {:?}, want {:?}",
            g.data, w.data
        )),
    }
}

fn ulps(a: impl Iterator<Item = u16>, b: impl Iterator<Item = u16>) -> Result<(), String> {
    for (i, (x, y)) in a.zip(b).enumerate() {
        if (ordered(x as i64, 16) - ordered(y as i64, 16)).abs() > 1 {
            return Err(format!(
                "element {i}: bits {x:#06x} vs {y:#06x} differ by more than one ulp"
            ));
        }
    }
    Ok(())
}

fn run_case(case: &Path, file: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(case.join(file)).map_err(|e| e.to_string())?;
    let m = tpusim_hlo::parse_module(&text).map_err(|e| format!("parse: {e:?}"))?;
    tpusim_interp::check_single_device(&m).map_err(|e| e.to_string())?;
    let shapes = m.entry_parameter_shapes();
    let args = npz::read_args(&case.join("inputs.npz"), &shapes).map_err(|e| e.to_string())?;
    let got = tpusim_interp::execute(&m, args).map_err(|e| e.to_string())?;
    let out_shapes: Vec<Shape> = m
        .instr(m.entry().root)
        .shape
        .leaves()
        .into_iter()
        .map(|a| Shape::Array(a.clone()))
        .collect();
    let want = npz::read_named(&case.join("outputs.npz"), "out", &out_shapes)
        .map_err(|e| e.to_string())?;
    if got.len() != want.len() {
        return Err(format!("{} results, want {}", got.len(), want.len()));
    }
    let reduces = m.instrs.iter().any(|i| {
        matches!(
            i.opcode,
            Opcode::Reduce | Opcode::Dot | Opcode::Convolution | Opcode::ReduceWindow
        )
    });
    let rtol = if reduces { 1e-4 } else { 1e-5 };
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        compare(g, w, rtol).map_err(|e| format!("out{k}: {e}"))?;
    }
    Ok(())
}

#[test]
fn jax_cases_match_reference_outputs() {
    let expected = expected_failures();
    let mut seen = Vec::new();
    let mut problems = Vec::new();
    let mut passed = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("jax_cases directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("meta.json").exists())
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "no reference cases found");
    for case in &entries {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        for file in ["pre.hlo", "post.hlo"] {
            let key = format!("{name}/{file}");
            seen.push(key.clone());
            let result = run_case(case, file);
            match (expected.get(&key), result) {
                (None, Ok(())) => passed += 1,
                (None, Err(e)) => problems.push(format!("{key}: FAILED: {e}")),
                (Some(_), Ok(())) => problems.push(format!(
                    "{key}: listed in expected_failures.txt but now passes; remove it"
                )),
                (Some(why), Err(e)) => {
                    if !(e.contains("unsupported") || e.contains("not supported")) {
                        problems.push(format!(
                            "{key}: expected an unsupported error ({why}), got: {e}"
                        ));
                    }
                }
            }
        }
    }
    for key in expected.keys() {
        if !seen.contains(key) {
            problems.push(format!(
                "{key}: listed in expected_failures.txt but no such case"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} passed; problems:\n{}",
        passed,
        problems.join("\n")
    );
    assert!(passed > 0);
    let _ = T::F32;
}
