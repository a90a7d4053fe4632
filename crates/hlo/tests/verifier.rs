//! Verifier and shape-inference tests: every real corpus file verifies, hand-
//! written broken modules are rejected with precise messages, and inference
//! reproduces the shapes XLA wrote into real dumps.

use std::path::{Path, PathBuf};

use tpusim_hlo::infer::{
    expect_shape, infer_shape, shape_text, shapes_compatible, Expect, InferError,
};
use tpusim_hlo::{parse_modules, verify, Module, Opcode, Shape};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/corpus")
}

fn corpus_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "hlo") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&corpus_dir(), &mut out);
    out
}

fn parse_file(p: &Path) -> Vec<Module> {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    parse_modules(&text).unwrap_or_else(|e| panic!("parse {}: {e:?}", p.display()))
}

/// Corpus files that are not valid HLO, with the error XLA's verifier gives
/// them too: print_indexing_test.hlo is input to an indexing printer that
/// never verifies it, and passes an `s32[1024]` operand to an `s32[]` fused
/// parameter.
const INVALID_CORPUS_FILES: &[(&str, &str)] = &[(
    "zml__xla__xla__tools__print_indexing_test.hlo",
    "fusion computation parameter 1 is s32[] but the operand is s32[1024]",
)];

#[test]
fn every_corpus_file_verifies() {
    let files = corpus_files();
    assert!(files.len() > 200, "corpus not found: {} files", files.len());
    let mut failures = Vec::new();
    let mut invalid_seen = 0;
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        if let Some((_, want)) = INVALID_CORPUS_FILES.iter().find(|(n, _)| *n == name) {
            let errors: Vec<String> = parse_file(f)
                .iter()
                .filter_map(|m| verify(m).err())
                .flatten()
                .map(|e| e.message)
                .collect();
            assert!(
                errors.iter().any(|e| e.contains(want)),
                "{name}: expected `{want}`, got {errors:?}"
            );
            invalid_seen += 1;
            continue;
        }
        for m in parse_file(f) {
            if let Err(errs) = verify(&m) {
                for e in errs.iter().take(5) {
                    failures.push(format!("{}: {}", f.display(), e.message));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(invalid_seen, INVALID_CORPUS_FILES.len());
}

/// Inference against XLA's own output: every instruction whose shape is
/// inferable must get exactly the shape XLA printed (dims only for dot and
/// convolution, whose element type is a free preferred type).
#[test]
fn inferred_shapes_match_corpus() {
    let mut checked: std::collections::BTreeMap<&'static str, usize> = Default::default();
    let mut failures = Vec::new();
    for f in corpus_files() {
        let name = f.file_name().unwrap().to_string_lossy();
        if INVALID_CORPUS_FILES.iter().any(|(n, _)| *n == name) {
            continue;
        }
        for m in parse_file(&f) {
            let sigs = m.signatures();
            for ins in &m.instrs {
                let ops: Vec<&Shape> = ins.operands.iter().map(|&o| &m.instr(o).shape).collect();
                match infer_shape(ins.opcode, &ops, &ins.attrs, &sigs) {
                    Ok(s) if same_result(ins.opcode, &s, &ins.shape) => {
                        *checked.entry(ins.opcode.name()).or_default() += 1;
                    }
                    Ok(s) => failures.push(format!(
                        "{}: {}: inferred {} declared {}",
                        f.display(),
                        ins.name,
                        shape_text(&s),
                        shape_text(&ins.shape)
                    )),
                    Err(InferError::NotInferable(_)) => {}
                    Err(e) => failures.push(format!("{}: {}: {e}", f.display(), ins.name)),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The corpus exercises a broad set of opcodes; keep it that way.
    assert!(
        checked.len() >= 70,
        "only {} opcodes inferred: {checked:?}",
        checked.len()
    );
}

fn same_result(op: Opcode, inferred: &Shape, declared: &Shape) -> bool {
    use Opcode::*;
    match (op, inferred, declared) {
        (Dot | Convolution | RaggedDot | ScaledDot, Shape::Array(a), Shape::Array(b)) => {
            a.dims == b.dims
        }
        _ => shapes_compatible(inferred, declared),
    }
}

// ----- negative tests: hand-written broken modules ---------------------------------

/// Verifier messages for a one-module text (which must parse).
fn errors_of(text: &str) -> Vec<String> {
    let mut ms = parse_modules(text).unwrap_or_else(|e| panic!("parse failed: {e:?}\n{text}"));
    assert_eq!(ms.len(), 1);
    match verify(&ms.remove(0)) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.into_iter().map(|e| e.message).collect(),
    }
}

/// Asserts that some error message contains every needle.
fn assert_rejects(text: &str, needles: &[&str]) {
    let errs = errors_of(text);
    assert!(
        errs.iter().any(|e| needles.iter().all(|n| e.contains(n))),
        "expected an error containing {needles:?}, got {errs:?}"
    );
}

/// A module whose entry has `params` then `body`; `comps` go before it.
fn module(comps: &str, body: &str) -> String {
    format!("HloModule t\n\n{comps}\nENTRY e {{\n{body}\n}}\n")
}

const ADD_F32: &str = "add_f32 {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n";

#[test]
fn rejects_elementwise_shape_mismatch() {
    let text = module(
        "",
        "  a = f32[4,8] parameter(0)\n  ROOT add.3 = f32[8,4] add(a, a)",
    );
    assert_rejects(
        &text,
        &["add.3: shape mismatch: inferred f32[4,8] but declared f32[8,4]"],
    );
}

#[test]
fn rejects_implicit_broadcast() {
    let text = module(
        "",
        "  a = f32[4,8] parameter(0)\n  s = f32[] parameter(1)\n  ROOT m = f32[4,8] multiply(a, s)",
    );
    assert_rejects(&text, &["m: ", "same dimensions", "f32[4,8] vs f32[]"]);
}

#[test]
fn rejects_compare_not_pred() {
    let text = module(
        "",
        "  a = s32[4] parameter(0)\n  ROOT c = s32[4] compare(a, a), direction=LT",
    );
    assert_rejects(
        &text,
        &["c: shape mismatch: inferred pred[4] but declared s32[4]"],
    );
}

#[test]
fn rejects_missing_required_attribute() {
    let text = module(
        "",
        "  a = f32[4] parameter(0)\n  ROOT rp = f32[4] reduce-precision(a), exponent_bits=5",
    );
    assert_rejects(
        &text,
        &["rp: ", "missing required attribute", "mantissa_bits"],
    );
}

#[test]
fn rejects_transpose_shape() {
    let text = module(
        "",
        "  a = f32[2,3] parameter(0)\n  ROOT t = f32[2,3] transpose(a), dimensions={1,0}",
    );
    assert_rejects(
        &text,
        &["t: shape mismatch: inferred f32[3,2] but declared f32[2,3]"],
    );
}

#[test]
fn rejects_broadcast_shape() {
    let text = module(
        "",
        "  a = f32[3] parameter(0)\n  ROOT b = f32[4,3] broadcast(a), dimensions={0}",
    );
    assert_rejects(
        &text,
        &[
            "b: ",
            "cannot broadcast f32[3] with dimensions={0} to declared f32[4,3]",
        ],
    );
}

#[test]
fn rejects_reshape_element_count() {
    let text = module(
        "",
        "  a = f32[6] parameter(0)\n  ROOT r = f32[4] reshape(a)",
    );
    assert_rejects(&text, &["r: ", "cannot reshape f32[6] to declared f32[4]"]);
}

#[test]
fn rejects_strided_slice_shape() {
    let text = module(
        "",
        "  a = f32[8] parameter(0)\n  ROOT s = f32[3] slice(a), slice={[0:7:2]}",
    );
    assert_rejects(
        &text,
        &["s: shape mismatch: inferred f32[4] but declared f32[3]"],
    );
}

#[test]
fn rejects_pad_shape_with_negative_and_interior_padding() {
    // 4 elements + 3 interior + 1 low - 1 high = 7.
    let text = module(
        "",
        "  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n  ROOT p = f32[8] pad(a, z), padding=1_-1_1",
    );
    assert_rejects(
        &text,
        &["p: shape mismatch: inferred f32[7] but declared f32[8]"],
    );
}

#[test]
fn rejects_concatenate_shape() {
    let text = module(
        "",
        "  a = f32[2,3] parameter(0)\n  b = f32[4,3] parameter(1)\n  ROOT c = f32[5,3] concatenate(a, b), dimensions={0}",
    );
    assert_rejects(
        &text,
        &["c: shape mismatch: inferred f32[6,3] but declared f32[5,3]"],
    );
}

#[test]
fn rejects_reduce_with_bad_to_apply_signature() {
    let bad = "add3 {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  z = f32[] parameter(2)\n  ROOT s = f32[] add(x, y)\n}\n";
    let text = module(
        bad,
        "  a = f32[4,8] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[4] reduce(a, z), dimensions={1}, to_apply=add3",
    );
    assert_rejects(
        &text,
        &["r: reduce to_apply must take 2 parameters, takes 3"],
    );
    let wrong_type = "to_s32 {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = s32[] convert(x)\n}\n";
    let text = module(
        wrong_type,
        "  a = f32[4,8] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[4] reduce(a, z), dimensions={1}, to_apply=to_s32",
    );
    assert_rejects(
        &text,
        &["r: reduce to_apply has signature (f32[], f32[]) -> s32[] but its inputs need (f32[], f32[]) -> f32[]"],
    );
}

#[test]
fn rejects_reduce_shape() {
    let text = module(
        ADD_F32,
        "  a = f32[4,8] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[8] reduce(a, z), dimensions={1}, to_apply=add_f32",
    );
    assert_rejects(
        &text,
        &["r: shape mismatch: inferred f32[4] but declared f32[8]"],
    );
}

#[test]
fn rejects_reduce_window_shape() {
    // size 3, stride 2, pad 1_1 over 8: (10 - 3) / 2 + 1 = 4.
    let text = module(
        ADD_F32,
        "  a = f32[8] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[3] reduce-window(a, z), window={size=3 stride=2 pad=1_1}, to_apply=add_f32",
    );
    assert_rejects(
        &text,
        &["r: shape mismatch: inferred f32[4] but declared f32[3]"],
    );
}

#[test]
fn dot_checks_dims_but_not_element_type() {
    let ok = module(
        "",
        "  a = bf16[2,3] parameter(0)\n  b = bf16[3,4] parameter(1)\n  ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
    );
    assert_eq!(errors_of(&ok), Vec::<String>::new());
    let bad = module(
        "",
        "  a = f32[5,2,3] parameter(0)\n  b = f32[5,3,4] parameter(1)\n  ROOT d = f32[2,5,4] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}",
    );
    assert_rejects(
        &bad,
        &["d: shape mismatch: inferred f32[5,2,4] (any element type) but declared f32[2,5,4]"],
    );
}

/// The interpreter indexes each operand's dims by these lists (issue 14: a
/// `lhs_contracting_dims={5}` panicked in `ops.rs`), so each must be in range.
#[test]
fn rejects_dot_dimensions_out_of_range() {
    let dot = |dims: &str| {
        module(
            "",
            &format!("  a = f32[2,3] parameter(0)\n  b = f32[3,4] parameter(1)\n  ROOT d = f32[2,4] dot(a, b), {dims}"),
        )
    };
    let ok = dot("lhs_contracting_dims={1}, rhs_contracting_dims={0}");
    assert_eq!(errors_of(&ok), Vec::<String>::new());
    for (dims, needle) in [
        (
            "lhs_contracting_dims={5}, rhs_contracting_dims={0}",
            "dimension 5 is out of range for rank 2",
        ),
        (
            "lhs_contracting_dims={1}, rhs_contracting_dims={-1}",
            "dimension -1 is out of range for rank 2",
        ),
        (
            "lhs_batch_dims={2}, rhs_batch_dims={1}, lhs_contracting_dims={1}, rhs_contracting_dims={0}",
            "dimension 2 is out of range for rank 2",
        ),
        (
            "lhs_batch_dims={1}, rhs_batch_dims={1}, lhs_contracting_dims={1}, rhs_contracting_dims={0}",
            "dimension 1 is repeated in lhs batch/contracting dims={1,1}",
        ),
    ] {
        assert_rejects(&dot(dims), &["d: ", needle]);
    }
}

/// The interpreter maps operand dim `i` to result dim `dimensions[i]` (issue
/// 14: `dimensions={3}` for a rank-2 result panicked in `ops.rs`).
#[test]
fn rejects_broadcast_dimensions_out_of_range() {
    for dims in ["{3}", "{2}", "{-1}"] {
        let text = module(
            "",
            &format!(
                "  a = f32[3] parameter(0)\n  ROOT b = f32[4,3] broadcast(a), dimensions={dims}"
            ),
        );
        assert_rejects(
            &text,
            &[
                "b: ",
                &format!("cannot broadcast f32[3] with dimensions={dims} to declared f32[4,3]"),
            ],
        );
    }
}

/// Issue 14: a `pred[3]` choosing between `f32[4]`s panicked in `ops.rs`.
/// A predicate of the branches' dims, or a scalar one, is accepted.
#[test]
fn rejects_select_predicate_of_another_shape() {
    let select = |pred: &str| {
        module(
            "",
            &format!("  p = {pred} parameter(0)\n  a = f32[4] parameter(1)\n  ROOT s = f32[4] select(p, a, a)"),
        )
    };
    for pred in ["pred[4]", "pred[]"] {
        assert_eq!(errors_of(&select(pred)), Vec::<String>::new(), "{pred}");
    }
    assert_rejects(
        &select("pred[3]"),
        &[
            "s: ",
            "select predicate pred[3] does not match the branches' dimensions f32[4]",
        ],
    );
    assert_rejects(
        &select("pred[4,1]"),
        &["s: ", "select predicate pred[4,1] does not match"],
    );
}

#[test]
fn rejects_reduce_dimensions_out_of_range() {
    for (dims, needle) in [
        ("{5}", "dimension 5 is out of range for rank 2"),
        ("{-1}", "dimension -1 is out of range for rank 2"),
        ("{1,1}", "dimension 1 is repeated in dimensions={1,1}"),
    ] {
        let text = module(
            ADD_F32,
            &format!("  a = f32[4,8] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[4] reduce(a, z), dimensions={dims}, to_apply=add_f32"),
        );
        assert_rejects(&text, &["r: ", needle]);
    }
}

#[test]
fn rejects_convolution_shape() {
    // NHWC x HWIO, 3x3 window, stride 2, no padding over 8x8: 3x3 output.
    let text = module(
        "",
        "  x = f32[1,8,8,2] parameter(0)\n  k = f32[3,3,2,5] parameter(1)\n  ROOT c = f32[1,4,4,5] convolution(x, k), window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f",
    );
    assert_rejects(
        &text,
        &["c: shape mismatch: inferred f32[1,3,3,5] (any element type) but declared f32[1,4,4,5]"],
    );
}

#[test]
fn rejects_gather_shape() {
    let text = module(
        "",
        "  a = f32[10,6] parameter(0)\n  i = s32[5,1] parameter(1)\n  ROOT g = f32[5,4] gather(a, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}",
    );
    assert_rejects(
        &text,
        &["g: shape mismatch: inferred f32[5,6] but declared f32[5,4]"],
    );
}

#[test]
fn rejects_bad_while_signatures() {
    let comps = "cond {\n  s = f32[4] parameter(0)\n  ROOT c = s32[] constant(1)\n}\n\nbody {\n  s = f32[4] parameter(0)\n  ROOT r = f32[8] concatenate(s, s), dimensions={0}\n}\n";
    let text = module(
        comps,
        "  a = f32[4] parameter(0)\n  ROOT w = f32[4] while(a), condition=cond, body=body",
    );
    assert_rejects(
        &text,
        &["w: while condition must return pred[], returns s32[]"],
    );
    let comps = comps.replace("s32[] constant(1)", "pred[] constant(true)");
    let text = module(
        &comps,
        "  a = f32[4] parameter(0)\n  ROOT w = f32[4] while(a), condition=cond, body=body",
    );
    assert_rejects(
        &text,
        &["w: while body returns f32[8] but the loop state is f32[4]"],
    );
}

#[test]
fn rejects_call_and_conditional_parameter_mismatch() {
    let comps = "f {\n  x = f32[] parameter(0)\n  ROOT n = f32[] negate(x)\n}\n";
    let text = module(
        comps,
        "  a = f32[4] parameter(0)\n  ROOT c = f32[] call(a), to_apply=f",
    );
    assert_rejects(
        &text,
        &["c: call to_apply parameter 0 is f32[] but the operand is f32[4]"],
    );
    let text = module(
        comps,
        "  p = pred[] parameter(0)\n  a = f32[] parameter(1)\n  b = f32[2] parameter(2)\n  ROOT c = f32[] conditional(p, a, b), true_computation=f, false_computation=f",
    );
    assert_rejects(
        &text,
        &["c: conditional branch 1 parameter 0 is f32[] but the operand is f32[2]"],
    );
}

/// Found by the mutation test: swapping a fusion's operands kept the element
/// types, so the interpreter indexed an `f32[]` as the `f32[2,4]` parameter.
#[test]
fn rejects_fusion_operand_of_another_shape() {
    let comps = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nf {\n  x = f32[2,4] parameter(0)\n  y = f32[] parameter(1)\n  ROOT r = f32[] reduce(x, y), dimensions={0,1}, to_apply=add\n}\n";
    let ok = module(
        comps,
        "  a = f32[2,4] parameter(0)\n  z = f32[] constant(0)\n  ROOT c = f32[] fusion(a, z), kind=kLoop, calls=f",
    );
    assert!(errors_of(&ok).is_empty(), "{:?}", errors_of(&ok));
    let swapped = module(
        comps,
        "  a = f32[2,4] parameter(0)\n  z = f32[] constant(0)\n  ROOT c = f32[] fusion(z, a), kind=kLoop, calls=f",
    );
    assert_rejects(
        &swapped,
        &["c: fusion computation parameter 0 is f32[2,4] but the operand is f32[]"],
    );
}

#[test]
fn rejects_get_tuple_element_out_of_range() {
    let text = module(
        "",
        "  a = (f32[2], s32[]) parameter(0)\n  ROOT g = f32[2] get-tuple-element(a), index=2",
    );
    assert_rejects(
        &text,
        &["g: tuple index 2 is out of range for a tuple of 2 elements"],
    );
}

#[test]
fn rejects_bad_sort_comparator() {
    let text = module(
        ADD_F32,
        "  a = f32[8] parameter(0)\n  ROOT s = f32[8] sort(a), dimensions={0}, to_apply=add_f32",
    );
    assert_rejects(
        &text,
        &["s: sort to_apply must take 2 scalars", "return pred[]"],
    );
}

#[test]
fn rejects_collective_shapes() {
    let text = module(
        "",
        "  a = f32[4,2] parameter(0)\n  ROOT g = f32[4,2] all-gather(a), replica_groups={{0,1},{2,3}}, dimensions={0}",
    );
    assert_rejects(
        &text,
        &["g: shape mismatch: inferred f32[8,2] but declared f32[4,2]"],
    );
    let text = module(
        ADD_F32,
        "  a = f32[8] parameter(0)\n  ROOT r = f32[8] reduce-scatter(a), replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add_f32",
    );
    assert_rejects(
        &text,
        &["r: shape mismatch: inferred f32[2] but declared f32[8]"],
    );
}

#[test]
fn rejects_bitcast_convert_shape() {
    let text = module(
        "",
        "  a = f32[4] parameter(0)\n  ROOT b = s8[4] bitcast-convert(a)",
    );
    assert_rejects(
        &text,
        &["b: shape mismatch: inferred s8[4,4] but declared s8[4]"],
    );
}

#[test]
fn rejects_dynamic_slice_shape() {
    let text = module(
        "",
        "  a = f32[8,8] parameter(0)\n  i = s32[] parameter(1)\n  ROOT d = f32[2,8] dynamic-slice(a, i, i), dynamic_slice_sizes={2,4}",
    );
    assert_rejects(
        &text,
        &["d: shape mismatch: inferred f32[2,4] but declared f32[2,8]"],
    );
}

#[test]
fn rejects_async_start_shape() {
    let text = module(
        "",
        "  a = f32[8] parameter(0)\n  s = ((f32[8]), f32[4], u32[]) custom-call-start(a), custom_call_target=\"foo\"\n  ROOT d = f32[8] custom-call-done(s)",
    );
    assert_rejects(
        &text,
        &["d: shape mismatch: inferred f32[4] but declared f32[8]"],
    );
}

#[test]
fn rejects_iota_dimension_out_of_range() {
    let text = module("", "  ROOT i = s32[4,5] iota(), iota_dimension=2");
    assert_rejects(&text, &["i: ", "dimension 2 is out of range for rank 2"]);
}

// ----- structural rules (built by editing parsed modules) -------------------------

fn parse_one(text: &str) -> Module {
    parse_modules(text).expect("parses").remove(0)
}

#[test]
fn rejects_duplicate_names_and_missing_root() {
    let mut m = parse_one(&module(
        "",
        "  a = f32[4] parameter(0)\n  n = f32[4] negate(a)\n  ROOT r = f32[4] abs(n)",
    ));
    let n = m.entry().instrs[1];
    m.instrs[n.index()].name = "a".into();
    let errs = verify(&m).expect_err("duplicate name");
    assert!(
        errs.iter()
            .any(|e| e.message.contains("a: the name is used twice")
                && e.instr == Some(n)
                && e.comp == m.entry),
        "{errs:?}"
    );

    let mut m = parse_one(&module(
        ADD_F32,
        "  a = f32[4] parameter(0)\n  ROOT r = f32[4] abs(a)",
    ));
    let entry = m.entry;
    let foreign = m.comps[m.find_comp("add_f32").expect("comp").index()].root;
    m.comps[entry.index()].root = foreign;
    let errs = verify(&m).expect_err("root outside its computation");
    assert!(
        errs.iter()
            .any(|e| e.message.contains("has no ROOT instruction")),
        "{errs:?}"
    );
}

#[test]
fn rejects_operand_from_another_computation() {
    let mut m = parse_one(&module(
        ADD_F32,
        "  a = f32[] parameter(0)\n  ROOT r = f32[] abs(a)",
    ));
    let foreign = m.comps[m.find_comp("add_f32").expect("comp").index()].params[0];
    let r = m.entry().root;
    m.instrs[r.index()].operands[0] = foreign;
    let errs = verify(&m).expect_err("foreign operand");
    assert!(
        errs.iter().any(|e| e.message.starts_with("r: operand")),
        "{errs:?}"
    );
}

#[test]
fn rejects_missing_attribute_removed_after_parsing() {
    let mut m = parse_one(&module(
        "",
        "  a = f32[4] parameter(0)\n  ROOT c = pred[4] compare(a, a), direction=EQ",
    ));
    let c = m.entry().root;
    m.instrs[c.index()].attrs.retain(|a| a.name != "direction");
    let errs = verify(&m).expect_err("no direction");
    assert!(
        errs.iter()
            .any(|e| e.message == "c: compare is missing required attribute(s) direction"),
        "{errs:?}"
    );
}

#[test]
fn rejects_entry_layout_mismatch() {
    // The parser checks the layout against the entry, so break it afterwards.
    let text = "HloModule t, entry_computation_layout={(f32[8]{0})->f32[8]{0}}\n\nENTRY e {\n  a = f32[8] parameter(0)\n  ROOT r = f32[8] negate(a)\n}\n";
    let mut m = parse_one(text);
    let layout = m.config.entry_layout.as_mut().expect("layout");
    layout.0[0] = Shape::array(tpusim_hlo::PrimitiveType::F32, vec![4]);
    let errs = verify(&m).expect_err("layout mismatch");
    assert!(
        errs.iter().any(|e| e
            .message
            .contains("parameter 0 is f32[4] but the parameter is f32[8]")
            && e.instr.is_none()),
        "{errs:?}"
    );
}

// ----- inference through the parser --------------------------------------------------

/// The parser infers shapes left out of the text with the same rules.
#[test]
fn parser_infers_omitted_shapes() {
    let text = module(
        ADD_F32,
        "  a = f32[2,3] parameter(0)\n  b = bf16[3,4] parameter(1)\n  c = bf16[2,3] convert(a)\n  d = dot(c, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  z = f32[] constant(0)\n  e = convert(d)\n  t = transpose(a), dimensions={1,0}\n  r = reduce(a, z), dimensions={0}, to_apply=add_f32\n  ROOT out = tuple(d, t, r)",
    );
    let parsed = parse_modules(&text);
    // `e = convert(d)` has no shape and convert's type is free: rejected.
    assert!(parsed.is_err());
    let text = text.replace("  e = convert(d)\n", "");
    let m = parse_one(&text);
    let root = &m.instr(m.entry().root).shape;
    assert_eq!(shape_text(root), "(bf16[2,4], f32[3,2], f32[3])");
    assert!(verify(&m).is_ok());
}

#[test]
fn expectations_describe_partly_free_results() {
    let a = Shape::array(tpusim_hlo::PrimitiveType::F32, vec![128, 32]);
    let e = expect_shape(
        Opcode::CollectivePermuteStart,
        &[&a],
        &[],
        &parse_one(&module("", "  ROOT a = f32[] parameter(0)")).signatures(),
    )
    .expect("infers");
    assert_eq!(e.to_string(), "(f32[128,32], f32[128,32], ...)");
    assert!(matches!(e, Expect::Tuple { open: true, .. }));
}

// ----- robustness: inference never panics on inconsistent input --------------------

/// A tiny deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Small corpus files with many different opcodes.
fn fuzz_seeds() -> Vec<String> {
    corpus_files()
        .into_iter()
        .map(|p| std::fs::read_to_string(p).expect("read"))
        .filter(|t| t.len() < 6000)
        .collect()
}

/// Rewrites numbers in the text (sizes, dims, indices) and re-verifies
/// whatever still parses: every check must fail cleanly, not panic.
#[test]
fn verify_survives_mutated_numbers() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let replacements = ["0", "1", "2", "3", "7", "-1", "9223372036854775807", "4096"];
    for text in fuzz_seeds() {
        let digits: Vec<usize> = text
            .char_indices()
            .filter(|(_, c)| c.is_ascii_digit())
            .map(|(i, _)| i)
            .collect();
        for _ in 0..20 {
            let Some(&at) = digits.get(rng.below(digits.len())) else {
                break;
            };
            let end = text[at..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(text.len(), |k| at + k);
            let new = replacements[rng.below(replacements.len())];
            let mutated = format!("{}{new}{}", &text[..at], &text[end..]);
            if let Ok(ms) = parse_modules(&mutated) {
                for m in &ms {
                    let _ = verify(m);
                }
            }
        }
    }
}

/// Rewires operands to arbitrary earlier instructions of the same computation,
/// so inference sees operand shapes of every kind.
#[test]
fn verify_survives_rewired_operands() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for text in fuzz_seeds() {
        let Ok(ms) = parse_modules(&text) else {
            continue;
        };
        for mut m in ms {
            for c in 0..m.comps.len() {
                let order = m.comps[c].instrs.clone();
                for (k, &id) in order.iter().enumerate().skip(1) {
                    for op in 0..m.instrs[id.index()].operands.len() {
                        if rng.below(2) == 0 {
                            m.instrs[id.index()].operands[op] = order[rng.below(k)];
                        }
                    }
                }
            }
            let _ = verify(&m);
        }
    }
}

/// Every opcode reaches a shape rule (a missing one would silently accept
/// any shape or report "no shape rule").
#[test]
fn every_opcode_has_a_shape_rule() {
    let m = parse_one(&module("", "  ROOT a = f32[] parameter(0)"));
    let sigs = m.signatures();
    let s = Shape::array(tpusim_hlo::PrimitiveType::F32, vec![2]);
    for &op in Opcode::ALL {
        for n in 0..4 {
            let ops = vec![&s; n];
            if let Err(InferError::Invalid(msg)) = expect_shape(op, &ops, &[], &sigs) {
                assert!(!msg.contains("no shape rule"), "{op}: {msg}");
            }
        }
    }
}

#[test]
fn rejects_op_specific_operand_counts() {
    let text = module(
        ADD_F32,
        "  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[] reduce(a, z, z), dimensions={0}, to_apply=add_f32",
    );
    assert_rejects(
        &text,
        &["r: reduce needs an even number of operands", "has 3"],
    );
    let comps = "f {\n  x = f32[] parameter(0)\n  ROOT n = f32[] negate(x)\n}\n";
    let text = module(
        comps,
        "  i = s32[] parameter(0)\n  a = f32[] parameter(1)\n  ROOT c = f32[] conditional(i, a), branch_computations={f, f}",
    );
    assert_rejects(
        &text,
        &["c: conditional needs", "2 branches for 2 operands"],
    );
}

#[test]
fn reports_dangling_ids_without_panicking() {
    let mut m = parse_one(&module("", "  ROOT a = f32[] parameter(0)"));
    let entry = m.entry;
    m.comps[entry.index()]
        .instrs
        .push(tpusim_hlo::InstrId(9999));
    let errs = verify(&m).expect_err("dangling id");
    assert!(
        errs[0].message.contains("refers to a missing instruction") && errs[0].comp == entry,
        "{errs:?}"
    );
}

#[test]
fn rejects_layouts_that_are_not_permutations() {
    // (A layout of the wrong length is already a parse error.)
    for (layout, shape) in [("{1,2}", "f32[2,3]"), ("{0,0}", "f32[2,3]")] {
        let text = module("", &format!("  ROOT a = {shape}{layout} parameter(0)"));
        assert_rejects(
            &text,
            &[&format!(
                "a: layout {layout} is not a permutation of the 2 dimensions"
            )],
        );
    }
    let nested = module("", "  ROOT t = (f32[2], (s32[2,2]{0,0})) parameter(0)");
    assert_rejects(&nested, &["t: layout {0,0}"]);
    let fine = module("", "  ROOT a = f32[2,3,4]{0,2,1} parameter(0)");
    assert_eq!(errors_of(&fine), Vec::<String>::new());
}

#[test]
fn rejects_all_gather_shapes_that_do_not_gather() {
    let text = "HloModule t, num_partitions=2\n\nENTRY e {\n  a = u8[2,6] parameter(0)\n  ROOT g = u8[2,3] all-gather(a), dimensions={1}, replica_groups={{0,1}}\n}\n";
    assert_rejects(
        text,
        &["g: shape mismatch: inferred u8[2,12] but declared u8[2,3]"],
    );
}

#[test]
fn rejects_device_counts_outside_the_documented_limit() {
    let body = "  ROOT a = f32[4] parameter(0)";
    for (header, needle) in [
        ("num_partitions=4294967295", "asks for 4294967295 devices"),
        (
            "num_partitions=65536, replica_count=65536",
            "asks for 4294967296 devices",
        ),
    ] {
        let text = format!("HloModule t, {header}\n\nENTRY e {{\n{body}\n}}\n");
        assert_rejects(&text, &[needle]);
    }
    let limit = tpusim_hlo::MAX_DEVICES;
    let text = format!("HloModule t, num_partitions={limit}\n\nENTRY e {{\n{body}\n}}\n");
    assert_eq!(errors_of(&text), Vec::<String>::new());
}

/// A module whose entry reaches a `negate` through `calls` nested calls.
fn nested_calls(calls: usize) -> String {
    let mut text = String::from(
        "HloModule deep\n\nc0 {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] negate(p)\n}\n",
    );
    for i in 1..calls {
        text += &format!(
            "\nc{i} {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] call(p), to_apply=c{}\n}}\n",
            i - 1
        );
    }
    text + &format!(
        "\nENTRY e {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] call(p), to_apply=c{}\n}}\n",
        calls - 1
    )
}

#[test]
fn call_nesting_is_bounded_at_the_documented_depth() {
    let limit = tpusim_hlo::MAX_CALL_DEPTH;
    assert_eq!(errors_of(&nested_calls(limit)), Vec::<String>::new());
    assert_rejects(
        &nested_calls(limit + 1),
        &[
            &format!("nest {} calls deep", limit + 1),
            &format!("at most {limit}"),
        ],
    );
    // Far beyond the bound the verifier itself must not recurse.
    let deep = nested_calls(100_000);
    let verified = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || errors_of(&deep))
        .expect("spawn")
        .join()
        .expect("no stack overflow");
    assert!(verified
        .iter()
        .any(|e| e.contains("nest 100000 calls deep")));
}
