//! The measured-vs-predicted page of the real jax_mlp capture in headless
//! Chromium: it renders without errors or network requests, the summary
//! says how the module matched, and the op rows are in time-at-stake order.
//! A screenshot is kept as `target/tmp/profile-diff/diff.png`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tpusim_trace::{
    captured_programs, diff_rows, find_xplanes, match_module, read_xspace, summarize, timed_ops,
    ProfileDiff, Verdict,
};

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn diff() -> ProfileDiff {
    let files = find_xplanes(&testdata("profiles/jax_mlp")).unwrap();
    let spaces: Vec<_> = files.iter().map(|f| read_xspace(f).unwrap()).collect();
    let summary = summarize(&spaces);
    let text = std::fs::read_to_string(testdata("profiles/jax_mlp/step.hlo")).unwrap();
    let m = tpusim_hlo::parse_module(&text).unwrap();
    let matching = match_module(&m, &captured_programs(&spaces), &|p| timed_ops(&summary, p));
    assert_eq!(matching.verdict, Verdict::Same);
    let chip = tpusim_arch::by_id("v5e").unwrap();
    let analysis = tpusim_perf::analyze(&m, &chip);
    let times = tpusim_trace::predicted_avg_times(std::slice::from_ref(&analysis));
    let rows = diff_rows(&summary, "jit_step", &times);
    ProfileDiff {
        capture: "testdata/profiles/jax_mlp".into(),
        capture_device: tpusim_trace::capture_device(&spaces),
        module: "jit_step".into(),
        chip: chip.name.clone(),
        measured_total_s: rows.iter().map(|r| r.measured_total_s).sum(),
        predicted_total_s: rows
            .iter()
            .filter_map(|r| r.predicted_avg_s.map(|p| p * r.occurrences as f64))
            .sum(),
        matching,
        rows,
    }
}

/// Runs headless Chromium with `args` on `url`; (stdout, stderr).
fn chromium(browser: &Path, args: &[String], url: &str, profile: &Path) -> (String, String) {
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
            "--window-size=1200,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the browser");
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    while child.try_wait().expect("wait for the browser").is_none() {
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (out.join().unwrap(), err.join().unwrap())
}

#[test]
fn the_diff_page_renders_in_headless_chromium() {
    let d = diff();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profile-diff");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("diff.html");
    std::fs::write(
        &page,
        tpusim_views::profile_diff_html(std::slice::from_ref(&d)),
    )
    .unwrap();
    let url = format!("file://{}", page.display());
    let browser = tpusim_testtools::chromium(env!("CARGO_TARGET_TMPDIR"));

    let (dom, log) = chromium(&browser, &["--dump-dom".into()], &url, &dir.join("p1"));
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("net::ERR_") || l.contains("Uncaught") || l.contains(":ERROR:CONSOLE")
        })
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(dom.contains("jit_step: measured vs predicted on"), "{dom}");
    assert!(dom.contains("the same program"), "{dom}");
    assert!(dom.contains("CPU (no TPU in the capture"), "{dom}");
    assert!(dom.contains(&d.matching.captured_fingerprint));
    // The rendered rows, in order, are the diff's rows by time at stake.
    let names: Vec<&str> = dom
        .split("<tr><td class=\"name\">")
        .skip(1)
        .map(|r| r.split('<').next().unwrap_or(""))
        .collect();
    let want: Vec<&str> = d.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, want);
    assert!(d
        .rows
        .windows(2)
        .all(|w| w[0].at_stake_s >= w[1].at_stake_s));

    let shot = dir.join("diff.png");
    let _ = chromium(
        &browser,
        &[format!("--screenshot={}", shot.display())],
        &url,
        &dir.join("p2"),
    );
    assert!(std::fs::metadata(&shot)
        .map(|m| m.len() > 1000)
        .unwrap_or(false));
}
