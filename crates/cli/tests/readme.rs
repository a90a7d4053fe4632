//! The README's command table, run as a user reads it: every `tpusim ...`
//! usage in it, once with only its required arguments and once with every
//! optional flag written in, with each placeholder (`FILE`, `C`, `DIR`, ...)
//! filled with a real input. Every form must succeed and print or write
//! something; every subcommand `tpusim --help` lists must have a row.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// Every usage in the command table: the first code span of each row that
/// starts with `| \`tpusim `, with the table's escaped `\|` unescaped.
fn usages(readme: &str) -> Vec<String> {
    readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `tpusim "))
        .filter_map(|rest| rest.split('`').next())
        .map(|u| format!("tpusim {}", u.replace("\\|", "|")))
        .collect()
}

/// The usage with its `[...]` groups dropped (`full == false`) or written in
/// (`full`); of `a|b` alternatives the first, and no `...` continuation.
fn expand(usage: &str, full: bool) -> Vec<String> {
    let mut out = String::new();
    let mut depth = 0u32;
    let mut dropped_from = None;
    for ch in usage.chars() {
        match ch {
            '[' => {
                depth += 1;
                if !full && dropped_from.is_none() {
                    dropped_from = Some(depth);
                }
            }
            ']' => {
                if dropped_from == Some(depth) {
                    dropped_from = None;
                }
                depth = depth.saturating_sub(1);
            }
            _ if dropped_from.is_none() => out.push(ch),
            _ => {}
        }
    }
    out.split_whitespace()
        .filter(|t| *t != "...")
        .map(|t| t.split('|').next().unwrap_or(t).to_string())
        .skip(1) // `tpusim`
        .collect()
}

/// Inputs the placeholders stand for, made once in a fresh folder.
struct Inputs {
    dir: PathBuf,
    /// A small module whose output is shaped as its input (for `run`).
    negate: String,
    npz: String,
}

impl Inputs {
    fn new() -> Inputs {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let negate = dir.join("negate.hlo");
        std::fs::write(
            &negate,
            "HloModule negate\n\nENTRY e {\n  p = f32[4,8] parameter(0)\n  ROOT n = f32[4,8] negate(p)\n}\n",
        )
        .unwrap();
        let negate = negate.display().to_string();
        // Random inputs run once; their result, renamed arg0, is the input.
        let out = dir.join("random.npz").display().to_string();
        let made = run(
            &dir,
            &["run", &negate, "--random-inputs", "1", "--output", &out],
        );
        assert!(made.0, "{}", made.1);
        let npz = dir.join("in.npz");
        rename_entries(Path::new(&out), &npz, "out", "arg");
        let npz = npz.display().to_string();
        Inputs { dir, negate, npz }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// Copies the npz `from` to `to`, its arrays `{old}N` named `{new}N`.
fn rename_entries(from: &Path, to: &Path, old: &str, new: &str) {
    use std::io::{Read, Write};
    let mut src = zip::ZipArchive::new(std::fs::File::open(from).unwrap()).unwrap();
    let mut dst = zip::ZipWriter::new(std::fs::File::create(to).unwrap());
    for i in 0..src.len() {
        let mut entry = src.by_index(i).unwrap();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        let name = entry.name().replacen(old, new, 1);
        let stored =
            zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Stored);
        dst.start_file(name, stored).unwrap();
        dst.write_all(&bytes).unwrap();
    }
    dst.finish().unwrap();
}

fn testdata(rel: &str) -> String {
    repo().join("testdata").join(rel).display().to_string()
}

const SHARDED: &str = "corpus/jax_generated/transformer_train_step_sharded.compiled.hlo";
const ONE_DEVICE: &str = "corpus/jax_generated/mlp_grad.compiled.hlo";

/// The module a subcommand's `FILE` is, and its `C`: a sharded program
/// where pods are involved, the chip whose torus takes `4x4x4`.
fn file_and_chip(args: &[String], inputs: &Inputs) -> (String, &'static str) {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    match args[0].as_str() {
        "run" => (inputs.negate.clone(), "v5e"),
        "partition" => (testdata("spmd_cases/dot_batch_parallel/pre.hlo"), "v5e"),
        "compile" => (testdata(SHARDED), "v5e"),
        "trace" => (testdata(SHARDED), "v5p"),
        "analyze" if has("--topology") => (testdata(SHARDED), "v5p"),
        "profile" => (testdata("profiles/jax_mlp/step.hlo"), "v5e"),
        "demo" => (String::new(), "v6e"),
        _ => (testdata(ONE_DEVICE), "v5e"),
    }
}

/// The longest op of `file` on `chip` (for `--explain OP`).
fn an_op(inputs: &Inputs, file: &str, chip: &str) -> String {
    let (ok, out) = run(&inputs.dir, &["analyze", file, "--chip", chip, "--json"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["ops"][0]["name"].as_str().unwrap().to_string()
}

/// The usage's tokens with every placeholder filled (`form` names the
/// outputs, so the two forms of one row do not collide).
fn fill(args: &[String], inputs: &Inputs, form: &str) -> Vec<String> {
    let (file, chip) = file_and_chip(args, inputs);
    let tag = format!("{}_{form}", args[0]);
    let mut out = Vec::new();
    for (i, t) in args.iter().enumerate() {
        let flag = if i > 0 { args[i - 1].as_str() } else { "" };
        let value = match (t.as_str(), flag) {
            ("FILE...", _) => {
                out.push(testdata(ONE_DEVICE));
                testdata("corpus/jax_generated/scan_while.lowered.hlo")
            }
            ("FILE", _) => file.clone(),
            ("C", _) => chip.to_string(),
            ("M", _) => "transformer".into(),
            ("OP", _) => an_op(inputs, &file, chip),
            ("PATH", _) => testdata("profiles/jax_mlp"),
            ("IN.npz", _) => inputs.npz.clone(),
            ("OUT.npz", _) => inputs.path(&format!("{tag}_out.npz")),
            ("OUT.html", _) => inputs.path(&format!("{tag}_diff.html")),
            ("D" | "DIR", _) => inputs.path(&format!("{tag}{flag}")),
            ("N", "--slices") => "2".into(),
            ("N", "--devices") => "8".into(),
            ("F", "--json-out") => inputs.path(&format!("{tag}.json")),
            ("F", "--hlo") => testdata("profiles/jax_mlp/step.hlo"),
            ("F", "--chip-file") => repo()
                .join("crates/arch/chips/v5e.toml")
                .display()
                .to_string(),
            ("F", "--device-order") => {
                // The first eight chips of the 4x4x4 torus, x fastest.
                let order: String = (0..8).map(|d| format!("{} {} 0\n", d % 4, d / 4)).collect();
                let path = inputs.path("order.txt");
                std::fs::write(&path, order).unwrap();
                path
            }
            (p, _) if p.chars().all(|c| c.is_ascii_uppercase() || c == '.') => {
                panic!("placeholder {p:?} (after {flag:?}) has no value in this test")
            }
            _ => t.clone(),
        };
        out.push(value);
    }
    out
}

/// (success, stdout or the reason) of `tpusim args` run in `dir`.
fn run(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tpusim");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        (true, stdout)
    } else {
        (false, String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn every_command_of_the_readme_runs_as_written() {
    let text = readme();
    let usages = usages(&text);
    assert!(usages.len() >= 10, "{usages:?}");
    let inputs = Inputs::new();
    for usage in &usages {
        for (form, full) in [("required", false), ("full", true)] {
            let args = fill(&expand(usage, full), &inputs, form);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let (ok, out) = run(&inputs.dir, &refs);
            assert!(
                ok,
                "`{usage}` ({form} form: tpusim {}) failed:\n{out}",
                args.join(" ")
            );
            let wrote = args.iter().any(|a| {
                a.starts_with(&inputs.dir.display().to_string())
                    && Path::new(a).exists()
                    && !a.ends_with("order.txt")
                    && !a.ends_with("in.npz")
            });
            assert!(
                !out.trim().is_empty() || wrote,
                "`tpusim {}` printed and wrote nothing",
                args.join(" ")
            );
        }
    }
    // The prose's own example, as written there.
    assert!(text.contains("`tpusim trace model.hlo --chip v5e -o out/`"));
    std::fs::copy(testdata(ONE_DEVICE), inputs.dir.join("model.hlo")).unwrap();
    let (ok, out) = run(
        &inputs.dir,
        &["trace", "model.hlo", "--chip", "v5e", "-o", "out/"],
    );
    assert!(ok, "{out}");
    assert!(inputs.dir.join("out/report.html").exists());
}

#[test]
fn the_readme_has_a_row_for_every_subcommand() {
    let (ok, help) = run(&repo(), &["--help"]);
    assert!(ok);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(listed.len() >= 10, "{help}");
    let usages = usages(&readme());
    for c in listed {
        assert!(
            usages
                .iter()
                .any(|u| u.split_whitespace().nth(1) == Some(c)),
            "`tpusim {c}` has no row in the README's command table"
        );
    }
}

#[test]
fn expanding_a_usage_drops_or_writes_in_its_optional_parts() {
    let u = "tpusim profile PATH [--json] [--hlo F --chip C [--html OUT.html]]";
    assert_eq!(expand(u, false), ["profile", "PATH"]);
    assert_eq!(
        expand(u, true),
        ["profile", "PATH", "--json", "--hlo", "F", "--chip", "C", "--html", "OUT.html"]
    );
    assert_eq!(
        expand("tpusim a X [--network analytic|sim] [--t 4x4x4 ...]", true),
        ["a", "X", "--network", "analytic", "--t", "4x4x4"]
    );
}
