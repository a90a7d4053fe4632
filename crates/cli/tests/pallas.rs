//! JAX's Pallas TPU kernels without a `cost_estimate`, lowered by
//! `tools/gen_pallas_kernels.py` (`testdata/pallas/`): `tpusim analyze`
//! recognizes each from its shapes and prices its work. The expected work
//! follows from the generator's parameters (`meta.json`), the splash
//! kernels' computed blocks from JAX's own mask objects.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn pallas(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/pallas")
        .join(rel)
}

fn meta(program: &str) -> Value {
    let text = std::fs::read_to_string(pallas("meta.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    all[program].clone()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("meta has no {key}: {v}"))
}

/// `tpusim analyze --json` of one generated program on v5e.
fn analyze(program: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .arg("analyze")
        .arg(pallas(&format!("{program}.hlo")))
        .args(["--chip", "v5e", "--json"])
        .output()
        .expect("run tpusim");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    match v {
        Value::Array(mut modules) => modules.remove(0),
        one => one,
    }
}

/// The custom calls' flops, by op name, and the assumption lines.
fn custom_calls(a: &Value) -> (Vec<(String, f64)>, String) {
    let ops = a["ops"].as_array().unwrap();
    let calls = ops
        .iter()
        .filter(|o| o["opcode"] == "custom-call")
        .map(|o| {
            let runs = o["occurrences"].as_f64().unwrap();
            (
                o["name"].as_str().unwrap().to_string(),
                o["flops"].as_f64().unwrap() / runs,
            )
        })
        .collect();
    let said = a["assumptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!said.contains("compute unknown"), "{said}");
    (calls, said)
}

/// Flops of `matmuls` block matmuls over every computed splash block.
fn splash_flops(m: &Value, matmuls: f64) -> f64 {
    let pairs =
        num(m, "heads") * num(m, "active_blocks_per_head") * num(m, "block_q") * num(m, "block_kv");
    2.0 * matmuls * pairs * num(m, "head_dim")
}

#[test]
fn splash_attention_forward_counts_only_the_blocks_its_mask_computes() {
    let m = meta("splash_fwd");
    let a = analyze("splash_fwd");
    let (calls, said) = custom_calls(&a);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].1, splash_flops(&m, 2.0));
    let blocks = format!(
        "{} of {} blocks per head computed",
        num(&m, "active_blocks_per_head"),
        num(&m, "blocks_per_head")
    );
    assert!(
        said.contains("splash attention forward") && said.contains(&blocks),
        "{said}"
    );
    // The causal mask computes about half the blocks: the kernel takes well
    // under a dense attention's MXU time.
    let dense = 4.0 * num(&m, "heads") * num(&m, "seq").powi(2) * num(&m, "head_dim");
    let step = a["step_time_s"].as_f64().unwrap();
    assert!(step < 0.8 * dense / 197e12, "{step}");
    assert!(step > calls[0].1 / 197e12, "{step}");
}

#[test]
fn splash_attention_backward_kernels_are_told_apart() {
    let m = meta("splash_bwd");
    let a = analyze("splash_bwd");
    let (calls, said) = custom_calls(&a);
    let mut flops: Vec<f64> = calls.iter().map(|c| c.1).collect();
    flops.sort_by(f64::total_cmp);
    // The forward with its residuals, dq (3 block matmuls), dkv (4).
    assert_eq!(
        flops,
        vec![
            splash_flops(&m, 2.0),
            splash_flops(&m, 3.0),
            splash_flops(&m, 4.0)
        ]
    );
    for phase in ["forward", "backward dq", "backward dkv"] {
        assert!(
            said.contains(&format!("splash attention {phase}")),
            "{said}"
        );
    }
}

#[test]
fn paged_attention_reads_its_sequences_pages() {
    let m = meta("paged_attention");
    let a = analyze("paged_attention");
    let (calls, said) = custom_calls(&a);
    let keys = num(&m, "pages_per_seq") * num(&m, "page_size");
    let expected = 4.0 * num(&m, "batch") * num(&m, "q_heads") * keys * num(&m, "head_dim");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].1, expected);
    assert!(
        said.contains("paged attention") && said.contains("assumed to fill its pages"),
        "{said}"
    );
    // Decode is HBM-bound: K and V of every sequence's pages, at most
    // v5e's HBM bandwidth.
    let kv = 2.0 * num(&m, "batch") * num(&m, "kv_heads") * keys * num(&m, "head_dim") * 2.0;
    let step = a["step_time_s"].as_f64().unwrap();
    assert!(step > kv / 819e9, "{step}");
}

#[test]
fn ragged_paged_attention_is_priced_as_attention_over_full_pages() {
    let m = meta("ragged_paged_attention");
    let a = analyze("ragged_paged_attention");
    let (calls, said) = custom_calls(&a);
    let keys = num(&m, "pages_per_seq") * num(&m, "page_size");
    let expected = 4.0 * num(&m, "tokens") * num(&m, "q_heads") * keys * num(&m, "head_dim");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].1, expected);
    assert!(said.contains("ragged paged attention"), "{said}");
}

#[test]
fn a_kernel_with_a_cost_estimate_is_priced_from_it() {
    let m = meta("megablox_gmm");
    let a = analyze("megablox_gmm");
    let (calls, said) = custom_calls(&a);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let gemm = 2.0 * num(&m, "m") * num(&m, "k") * num(&m, "n");
    assert_eq!(calls[0].1, gemm);
    assert!(said.contains("priced from its cost_estimate"), "{said}");
}
