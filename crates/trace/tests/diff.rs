//! Matching a module to a real capture by structure (the capture's own
//! HloProto), and the measured-vs-predicted rows.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tpusim_trace::{
    captured_programs, diff_rows, find_xplanes, match_module, read_xspace, summarize, timed_ops,
    Verdict,
};

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn capture() -> (
    Vec<tpusim_trace::xplane::XSpace>,
    tpusim_trace::ProfileSummary,
) {
    let files = find_xplanes(&testdata("profiles/jax_mlp")).unwrap();
    let spaces: Vec<_> = files.iter().map(|f| read_xspace(f).unwrap()).collect();
    let summary = summarize(&spaces);
    (spaces, summary)
}

fn module(rel: &str) -> tpusim_hlo::Module {
    tpusim_hlo::parse_module(&std::fs::read_to_string(testdata(rel)).unwrap()).unwrap()
}

#[test]
fn a_capture_carries_the_hlo_proto_of_every_program_it_ran() {
    let (spaces, summary) = capture();
    let programs = captured_programs(&spaces);
    let step = programs
        .iter()
        .find(|p| p.name.starts_with("jit_step("))
        .expect("jit_step's HloProto in /host:metadata");
    assert_eq!(step.module.name, "jit_step");
    // Every op the capture timed in jit_step is an instruction of it.
    let names: Vec<&str> = step
        .module
        .computations
        .iter()
        .flat_map(|c| &c.instructions)
        .map(|i| i.name.as_str())
        .collect();
    let timed = timed_ops(&summary, "jit_step");
    assert!(timed.len() > 10);
    for op in &timed {
        assert!(names.contains(&op.as_str()), "{op}");
    }
}

#[test]
fn the_compiled_module_is_the_program_the_capture_ran() {
    let (spaces, summary) = capture();
    let programs = captured_programs(&spaces);
    let m = module("profiles/jax_mlp/step.hlo");
    let r = match_module(&m, &programs, &|p| timed_ops(&summary, p));
    assert_eq!(r.verdict, Verdict::Same, "{r:?}");
    assert_eq!(r.given_fingerprint, r.captured_fingerprint);
    assert_eq!(r.matched, r.captured_total);
    assert!(r.program.starts_with("jit_step("));
}

#[test]
fn a_changed_shape_is_a_different_program() {
    let (spaces, summary) = capture();
    let programs = captured_programs(&spaces);
    // The same step for a batch of 32: same names, other shapes.
    let text = std::fs::read_to_string(testdata("profiles/jax_mlp/step.hlo")).unwrap();
    let mut m = tpusim_hlo::parse_module(&text).unwrap();
    let dot = m.instrs.iter().position(|i| i.name == "dot.1").unwrap();
    if let tpusim_hlo::Shape::Array(a) = &mut m.instrs[dot].shape {
        a.dims[0] += 1;
    }
    let r = match_module(&m, &programs, &|p| timed_ops(&summary, p));
    assert_eq!(r.verdict, Verdict::Different, "{r:?}");
    assert_ne!(r.given_fingerprint, r.captured_fingerprint);
    let d = r.mismatches.iter().find(|x| x.name == "dot.1").unwrap();
    assert_eq!(d.given, "dot f32[513,128]");
    assert_eq!(d.captured.as_deref(), Some("dot f32[512,128]"));
    // Another program altogether.
    let other = module("corpus/jax_generated/mlp_grad.compiled.hlo");
    let r = match_module(&other, &programs, &|p| timed_ops(&summary, p));
    assert_eq!(r.verdict, Verdict::Different);
    assert!(r.matched * 10 < r.captured_total, "{r:?}");
}

#[test]
fn the_module_before_optimization_is_recognized() {
    let (spaces, summary) = capture();
    let programs = captured_programs(&spaces);
    let m = module("profiles/jax_mlp/step.pre.hlo");
    let r = match_module(&m, &programs, &|p| timed_ops(&summary, p));
    assert_eq!(r.verdict, Verdict::PreOptimization, "{r:?}");
    assert!(r.program.starts_with("jit_step("));
}

#[test]
fn diff_rows_are_sorted_by_time_at_stake() {
    let (_, summary) = capture();
    let timed = timed_ops(&summary, "jit_step");
    // Predict half of every op's measured time, except for one op.
    let mut predicted = HashMap::new();
    for o in summary
        .ops
        .iter()
        .filter(|o| o.module.as_deref() == Some("jit_step"))
    {
        if o.name != "copy.5" {
            predicted.insert(o.name.clone(), o.avg_s / 2.0);
        }
    }
    let rows = diff_rows(&summary, "jit_step", &predicted);
    assert_eq!(rows.len(), timed.len());
    for w in rows.windows(2) {
        assert!(w[0].at_stake_s >= w[1].at_stake_s);
    }
    for r in &rows {
        match r.predicted_avg_s {
            Some(_) => {
                assert!((r.ratio.unwrap() - 2.0).abs() < 1e-9);
                assert!((r.at_stake_s - r.measured_total_s / 2.0).abs() < 1e-12);
            }
            None => {
                assert_eq!(r.name, "copy.5");
                let self_s = summary
                    .ops
                    .iter()
                    .find(|o| o.name == "copy.5")
                    .unwrap()
                    .self_s;
                assert_eq!(r.at_stake_s, self_s);
            }
        }
    }
    // Ops of other programs never get this program's predictions.
    assert!(rows.iter().all(|r| summary
        .ops
        .iter()
        .any(|o| o.name == r.name && o.module.as_deref() == Some("jit_step"))));
}

/// tpusim's HloProto of the compiled step against XLA's own (the one the
/// capture carries): per instruction the same opcode, shape with layout,
/// operands, called computations and the attributes XLA rebuilds it from.
#[test]
fn our_hlo_proto_matches_xlas_for_the_same_module() {
    use tpusim_xla_proto as xp;
    let (spaces, _) = capture();
    let programs = captured_programs(&spaces);
    let xla = &programs
        .iter()
        .find(|p| p.name.starts_with("jit_step("))
        .unwrap()
        .module;
    let ours = tpusim_trace::hlo_proto::module_proto(&module("profiles/jax_mlp/step.hlo"), 1);
    type View = (
        String,
        Option<xp::ShapeProto>,
        Vec<String>,
        Vec<String>,
        String,
    );
    fn view(m: &xp::HloModuleProto) -> HashMap<String, View> {
        let names: HashMap<i64, String> = m
            .computations
            .iter()
            .flat_map(|c| &c.instructions)
            .map(|i| (i.id, i.name.clone()))
            .collect();
        let comps: HashMap<i64, String> = m
            .computations
            .iter()
            .map(|c| (c.id, c.name.clone()))
            .collect();
        m.computations
            .iter()
            .flat_map(|c| &c.instructions)
            .map(|i| {
                let attrs = format!(
                    "dims={:?} index={} param={} kind={} dir={} slice={:?} dot={:?} op_name={:?}",
                    i.dimensions,
                    i.tuple_index,
                    i.parameter_number,
                    i.fusion_kind,
                    i.comparison_direction,
                    i.slice_dimensions,
                    i.dot_dimension_numbers,
                    i.metadata.as_ref().map(|md| &md.op_name),
                );
                let view = (
                    i.opcode.clone(),
                    i.shape.clone(),
                    i.operand_ids.iter().map(|o| names[o].clone()).collect(),
                    i.called_computation_ids
                        .iter()
                        .map(|c| comps[c].clone())
                        .collect(),
                    attrs,
                );
                (i.name.clone(), view)
            })
            .collect()
    }
    let (a, b) = (view(&ours), view(xla));
    assert_eq!(a.len(), b.len());
    for (name, want) in &b {
        assert_eq!(a.get(name), Some(want), "{name}");
    }
    assert_eq!(ours.entry_computation_name, xla.entry_computation_name);
    let (hp, xp_) = (
        ours.host_program_shape.unwrap(),
        xla.host_program_shape.clone().unwrap(),
    );
    assert_eq!(hp.parameters, xp_.parameters);
    assert_eq!(hp.result, xp_.result);
    assert_eq!(hp.parameter_names, xp_.parameter_names);
}
