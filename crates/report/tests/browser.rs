//! The HTML report in a real browser: headless Chromium loads it, its script
//! runs without errors (the op table gets sorted), it asks for nothing from
//! the network, and a screenshot is kept under `target/tmp/tpusim-report/`.
//!
//! Uses the Chromium on PATH; where there is none, the first run installs the
//! `chromium` Debian package when it is allowed (see `tpusim-testtools`), and
//! otherwise fails with the command to run.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tpusim_report::{report_html, ReportOptions};

/// Runs the browser headless on `url` with `extra` flags, killed after a minute.
fn headless(browser: &Path, extra: &[String], url: &str, profile: &Path) -> Output {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the browser");
    // Drain both pipes while waiting: a full pipe would block the browser.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the browser") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the browser did not finish within 90 s: {}",
                String::from_utf8_lossy(&err.join().unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Console errors, failed loads and uncaught exceptions in Chromium's log.
fn page_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            (l.contains("CONSOLE") && (l.contains(":ERROR:") || l.contains("Uncaught")))
                || l.contains("net::ERR_")
                || l.contains("Uncaught ")
        })
        .collect()
}

/// The rendered section `id` (the DOM after the report's script ran).
fn section<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = format!("<section id=\"{id}\">");
    dom.split(&start)
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .unwrap_or_else(|| panic!("no section {id} in the rendered report"))
}

/// Each section of the rendered report shows this run's figures: the step
/// time, a roofline point per op, a table row per op, the memory peak and
/// its chart, a row per collective, every hint and assumption.
fn check_sections(dom: &str, sim: &common::Owned) {
    use tpusim_report::units::{bytes, seconds};
    let a = &sim.analysis;
    let summary = section(dom, "summary");
    assert!(summary.contains(&seconds(a.step_time_s)), "{summary}");
    assert!(summary.contains("MFU"), "{summary}");

    let roofline = section(dom, "roofline");
    let points = roofline.matches("<circle class=\"dot ").count();
    let priced = a
        .ops
        .iter()
        .filter(|o| o.flops > 0.0 || o.bytes_accessed > 0.0)
        .count();
    assert!(
        points > 0 && points <= a.ops.len(),
        "{points} points for {} ops",
        a.ops.len()
    );
    assert!(
        points >= priced.min(1),
        "{points} points, {priced} ops with work"
    );

    let ops = section(dom, "ops");
    let rows = ops.matches("<tr").count() - 1; // the header row
    assert_eq!(rows, a.ops.len().min(1000), "op table rows");
    assert!(
        ops.contains(&a.ops[0].name),
        "the longest op is in the table"
    );

    let memory = section(dom, "memory");
    let peak = format!(
        "Peak <strong>{}</strong> at {}",
        bytes(sim.memory.peak_bytes),
        seconds(sim.memory.peak_time_s)
    );
    assert!(memory.contains(&peak), "{peak} not in the memory section");
    assert!(
        memory.contains("made of") && memory.contains("<svg"),
        "{memory}"
    );

    let communication = section(dom, "communication");
    let collectives = sim
        .schedule
        .events
        .iter()
        .filter(|e| e.lane == tpusim_perf::Lane::Ici)
        .count();
    assert!(collectives > 0);
    assert!(communication.contains("<table"), "{communication}");

    let notes = section(dom, "notes");
    for item in a.hints.iter().chain(&a.assumptions) {
        let escaped = item
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(notes.contains(&escaped), "{item} not listed");
    }
    assert!(!a.hints.is_empty() && !a.assumptions.is_empty());
    assert_eq!(
        notes.matches("<li").count(),
        a.hints.len() + a.assumptions.len(),
        "one item per hint and assumption"
    );
}

#[test]
fn report_renders_in_headless_chromium_without_errors() {
    let browser = tpusim_testtools::chromium(env!("CARGO_TARGET_TMPDIR"));
    let sim = common::simulate(
        "corpus/jax_generated/transformer_train_step_sharded.compiled.hlo",
        "v5e",
    );
    let html = report_html(&sim.run(), &ReportOptions::default());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tpusim-report");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    std::fs::write(&page, &html).unwrap();
    let url = format!("file://{}", page.display());
    let profile = dir.join("chromium-profile");

    let dom = headless(&browser, &["--dump-dom".to_string()], &url, &profile);
    let stdout = String::from_utf8_lossy(&dom.stdout);
    let stderr = String::from_utf8_lossy(&dom.stderr);
    assert!(
        dom.status.success(),
        "{} exited with {}: {stderr}",
        browser.display(),
        dom.status
    );
    assert!(
        stdout.contains(r#"data-report-ready="1""#),
        "the report's script did not finish; stderr:\n{stderr}"
    );
    assert!(
        !stdout.contains("data-report-errors=\""),
        "script errors: {}",
        stdout
            .split("data-report-errors=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("")
    );
    assert!(
        stdout.contains(r#"aria-sort="descending""#),
        "the op table was not sorted by its default column"
    );
    let errors = page_errors(&stderr);
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
    check_sections(&stdout, &sim);

    let png = dir.join("report.png");
    let _ = std::fs::remove_file(&png);
    let shot = headless(
        &browser,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1360,3400".to_string(),
        ],
        &url,
        &profile,
    );
    assert!(
        shot.status.success(),
        "screenshot failed: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert_eq!(&bytes[1..4], b"PNG", "not a PNG");
    assert!(bytes.len() > 20_000, "screenshot suspiciously small");
    eprintln!("screenshot: {}", png.display());
}
