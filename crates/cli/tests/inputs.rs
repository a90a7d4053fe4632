//! What the `tpusim` binary takes as a program file: plain and gzip-compressed HLO
//! text, read by content; StableHLO/MLIR text is refused with the one-line fix.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output};

const GOOD: &str =
    "HloModule m\n\nENTRY e {\n  a = f32[4] parameter(0)\n  ROOT b = f32[4] add(a, a)\n}\n";

/// What `jax.jit(f).lower(x).as_text()` prints by default.
const STABLEHLO: &str = "module @jit_f attributes {mhlo.num_partitions = 1 : i32} {\n  \
    func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {\n    \
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n";

fn tpusim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(args)
        .output()
        .expect("run tpusim")
}

fn write(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("tpusim-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

fn gzip(text: &str) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(text.as_bytes()).unwrap();
    enc.finish().unwrap()
}

#[test]
fn gzip_compressed_hlo_reads_like_plain_text_in_every_command() {
    let plain = write("m.hlo", GOOD.as_bytes());
    let packed = write("m.hlo.gz", &gzip(GOOD));
    for cmd in [&["fmt"][..], &["analyze", "--chip", "v5e", "--json"][..]] {
        let a = tpusim(&[cmd, &[plain.as_str()]].concat());
        let b = tpusim(&[cmd, &[packed.as_str()]].concat());
        assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
        assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
        assert_eq!(a.stdout, b.stdout, "{cmd:?} differs on the .gz file");
    }
    let run = tpusim(&["run", "--random-inputs", "1", &packed]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn corrupt_gzip_is_an_error_naming_the_file() {
    let mut bytes = gzip(GOOD);
    bytes.truncate(bytes.len() / 2);
    let path = write("cut.hlo.gz", &bytes);
    let out = tpusim(&["check", &path]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt gzip data") && err.contains(&path),
        "{err}"
    );
}

#[test]
fn stablehlo_text_is_refused_with_the_fix() {
    for (name, bytes) in [
        ("f.mlir", STABLEHLO.as_bytes().to_vec()),
        ("f.mlir.gz", gzip(STABLEHLO)),
    ] {
        let path = write(name, &bytes);
        let out = tpusim(&["analyze", "--chip", "v5e", &path]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("StableHLO"), "{err}");
        assert!(err.contains("as_text(dialect=\"hlo\")"), "{err}");
        assert!(!err.contains("unexpected character"), "{err}");
    }
}
