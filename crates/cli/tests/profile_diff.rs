//! `tpusim profile CAPTURE --hlo F --chip C`: the module is matched to the
//! capture's program by structure, a wrong or pre-optimization module is
//! refused with the reason, and `--html` writes the measured-vs-predicted page.

use std::path::PathBuf;
use std::process::{Command, Output};

fn tpusim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(args)
        .output()
        .expect("run tpusim")
}

fn testdata(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
        .display()
        .to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_program_the_capture_did_not_run_is_refused() {
    let capture = testdata("profiles/jax_mlp");
    let other = testdata("corpus/jax_generated/mlp_grad.compiled.hlo");
    let out = tpusim(&["profile", &capture, "--hlo", &other, "--chip", "v5e"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("is not the program the capture ran") && err.contains("fingerprint"),
        "{err}"
    );
    // It names a difference: an op the capture timed, with both shapes.
    assert!(err.contains("dot f32[256,512] in the capture"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "no predictions printed for the wrong program"
    );
}

#[test]
fn a_module_before_optimization_is_explained() {
    let capture = testdata("profiles/jax_mlp");
    let pre = testdata("profiles/jax_mlp/step.pre.hlo");
    let out = tpusim(&["profile", &capture, "--hlo", &pre, "--chip", "v5e"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("before XLA's optimizations")
            && err.contains("every prediction would be \"-\"")
            && err.contains("compile().as_text()"),
        "{err}"
    );
}

#[test]
fn the_compiled_module_gets_predictions_and_a_diff_page() {
    let capture = testdata("profiles/jax_mlp");
    let hlo = testdata("profiles/jax_mlp/step.hlo");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("profile-diff");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("diff.html");
    let page_arg = page.display().to_string();
    let args = [
        "profile", &capture, "--hlo", &hlo, "--chip", "v5e", "--json", "--html", &page_arg,
    ];
    let out = tpusim(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["matches"][0]["verdict"], "same");
    // Only jit_step's ops are predicted: jit_multiply has a fusion of the
    // same name that the module does not hold.
    for op in v["ops"].as_array().unwrap() {
        let predicted = op.get("predicted_avg_s").is_some();
        if op["module"] != "jit_step" {
            assert!(!predicted, "{op}");
        }
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("the same program"), "{html}");
    assert!(html.contains("jit_step(") && html.contains("measured / predicted"));
    // An existing page is not replaced without --force.
    let again = tpusim(&args);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("already exists"));
}

/// The shared sample capture (XLA:CPU) and its `jit_loss` program as XLA
/// prints it (`jit_loss.hlo`: xprof's graph viewer text of the capture's own
/// HloProto): matched instruction for instruction, and only jit_loss's
/// `ynn_fusion` is predicted, not jit_step's op of the same name.
#[test]
fn the_shared_capture_matches_its_program_op_for_op() {
    let capture = testdata("profiles/jax_cpu");
    let hlo = testdata("profiles/jax_cpu/jit_loss.hlo");
    let out = tpusim(&[
        "profile", &capture, "--hlo", &hlo, "--chip", "v5e", "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["matches"][0];
    assert_eq!(m["verdict"], "same");
    assert_eq!(m["matched"], m["captured_total"]);
    assert_eq!(m["given_fingerprint"], m["captured_fingerprint"]);
    let fusions: Vec<_> = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["name"] == "ynn_fusion")
        .map(|o| {
            (
                o["module"].as_str().unwrap(),
                o.get("predicted_avg_s").is_some(),
            )
        })
        .collect();
    assert!(fusions.contains(&("jit_loss", true)), "{fusions:?}");
    assert!(fusions.contains(&("jit_step", false)), "{fusions:?}");
}
