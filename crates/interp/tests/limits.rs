//! Run limits (`RunLimits`): a step budget, a deadline and an interrupt flag stop
//! never-ending `while` loops (testdata/limits) with `InterpError::Stopped` naming
//! the loop, on one device and on every device of a multi-device run, without
//! hanging at a rendezvous. Each run is watched: a hang fails the test.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tpusim_interp::{GlobalRun, InterpError, RunLimits, StopReason, Value};

/// Longest a stopped run may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

fn module(name: &str) -> tpusim_hlo::Module {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/limits")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("testdata/limits");
    tpusim_hlo::parse_module(&text).unwrap_or_else(|e| panic!("{e:?}"))
}

/// Runs `name` under `limits` on another thread; the error and how long it took.
fn run_watched(name: &str, limits: RunLimits) -> (InterpError, Duration) {
    let m = module(name);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let t = Instant::now();
        let opts = GlobalRun {
            limits,
            ..Default::default()
        };
        let r = tpusim_interp::run_global(&m, Vec::new(), &opts);
        let _ = tx.send((r, t.elapsed()));
    });
    let (r, took) = rx
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{name}: the run did not stop within {HANG:?}"));
    match r {
        Err(e) => (e, took),
        Ok(v) => panic!(
            "{name}: a never-ending loop finished with {} results",
            v.len()
        ),
    }
}

fn stopped(e: &InterpError) -> (&StopReason, Option<&str>, &str) {
    match e {
        InterpError::Stopped {
            reason,
            loop_name,
            computation,
        } => (reason, loop_name.as_deref(), computation),
        other => panic!("expected a stop, got: {other}"),
    }
}

fn steps(n: u64) -> RunLimits {
    RunLimits {
        max_steps: Some(n),
        ..Default::default()
    }
}

#[test]
fn a_step_limit_stops_a_never_ending_loop_and_names_it() {
    let (e, _) = run_watched("never_ending_while.hlo", steps(1000));
    assert_eq!(
        stopped(&e),
        (&StopReason::Steps(1000), Some("while.12"), "main.1")
    );
    assert_eq!(
        e.to_string(),
        "stopped after 1000 steps in while loop 'while.12' (computation 'main.1'): \
         raise --max-steps (Python: max_steps=)"
    );
}

/// A loop of `n` iterations, each evaluating a handful of instructions.
fn counted_loop(n: u32) -> tpusim_hlo::Module {
    let text = format!(
        "HloModule counted\n\n\
         cond {{\n  p = s32[] parameter(0)\n  k = s32[] constant({n})\n  \
         ROOT lt = pred[] compare(p, k), direction=LT\n}}\n\n\
         body {{\n  p = s32[] parameter(0)\n  one = s32[] constant(1)\n  \
         ROOT next = s32[] add(p, one)\n}}\n\n\
         ENTRY main {{\n  zero = s32[] constant(0)\n  \
         ROOT w = s32[] while(zero), condition=cond, body=body\n}}\n"
    );
    tpusim_hlo::parse_module(&text).unwrap_or_else(|e| panic!("{e:?}"))
}

#[test]
fn the_step_budget_counts_instructions_of_every_iteration() {
    let m = counted_loop(100);
    let run = |limit: u64| tpusim_interp::execute_limited(&m, Vec::new(), &steps(limit));
    // 100 iterations evaluate at least 100 * (cond + body) instructions.
    let e = run(100).expect_err("100 steps cannot run 100 iterations");
    assert_eq!(stopped(&e).0, &StopReason::Steps(100));
    assert_eq!(stopped(&e).1, Some("w"));
    // Within budget the result is unchanged, and with no limits too.
    let v = run(100_000).expect("fits in the budget");
    assert_eq!(v[0].as_array().unwrap().to_f64s(), vec![100.0]);
    let v = tpusim_interp::execute(&m, Vec::new()).unwrap();
    assert_eq!(v[0].as_array().unwrap().to_f64s(), vec![100.0]);
}

#[test]
fn a_stop_outside_any_loop_names_the_computation() {
    let m = counted_loop(5);
    let run = |limit: u64| tpusim_interp::execute_limited(&m, Vec::new(), &steps(limit));
    // Step 1 is `zero`, step 2 the `while` itself, step 3 the first inside it.
    let e = run(1).expect_err("one step");
    assert_eq!(stopped(&e), (&StopReason::Steps(1), None, "main"));
    assert!(
        e.to_string()
            .contains("in computation 'main' (no while loop running)"),
        "{e}"
    );
    let e = run(2).expect_err("two steps");
    assert_eq!(stopped(&e), (&StopReason::Steps(2), Some("w"), "main"));
}

#[test]
fn a_deadline_stops_the_loop_soon_after_it_passes() {
    // The deadline counts from here, where the limits are made.
    let asked = Instant::now();
    let limits = RunLimits::default().with_timeout(Some(Duration::from_millis(200)));
    let (e, took) = run_watched("never_ending_while.hlo", limits);
    let since_asked = asked.elapsed();
    let (reason, loop_name, _) = stopped(&e);
    assert!(matches!(reason, StopReason::Timeout(d) if *d >= Duration::from_millis(200)));
    assert_eq!(loop_name, Some("while.12"));
    assert!(since_asked >= Duration::from_millis(200), "{since_asked:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(e.to_string().starts_with("timed out after 0.2"), "{e}");
}

#[test]
fn an_interrupt_from_another_thread_stops_the_run() {
    let limits = RunLimits::default();
    let flag = limits.interrupt.clone();
    // The flag is set 150 ms after this point, whenever the run itself starts.
    let asked = Instant::now();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        flag.store(true, Ordering::SeqCst);
        Instant::now()
    });
    let (e, took) = run_watched("never_ending_while.hlo", limits);
    let since_asked = asked.elapsed();
    let set_at = setter.join().unwrap();
    assert_eq!(
        stopped(&e),
        (&StopReason::Interrupted, Some("while.12"), "main.1")
    );
    assert!(since_asked >= Duration::from_millis(150), "{since_asked:?}");
    // Stopped within a second of the flag being set (checked every step).
    assert!(set_at.elapsed() < Duration::from_secs(1), "{took:?}");
    assert_eq!(
        e.to_string(),
        "interrupted in while loop 'while.12' (computation 'main.1')"
    );
}

#[test]
fn every_device_stops_on_each_kind_of_limit() {
    // Two partitions meeting at an all-reduce in every iteration.
    let file = "never_ending_all_reduce.hlo";
    let (e, _) = run_watched(file, steps(1000));
    assert_eq!(
        stopped(&e),
        (&StopReason::Steps(1000), Some("while.20"), "main.2")
    );
    let (e, _) = run_watched(
        file,
        RunLimits::default().with_timeout(Some(Duration::from_millis(200))),
    );
    assert!(matches!(stopped(&e).0, StopReason::Timeout(_)), "{e}");
    assert_eq!(stopped(&e).1, Some("while.20"));
    let limits = RunLimits::default();
    let flag = limits.interrupt.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        flag.store(true, Ordering::SeqCst);
    });
    let (e, _) = run_watched(file, limits);
    assert_eq!(stopped(&e).0, &StopReason::Interrupted);
}

#[test]
fn a_device_waiting_at_a_collective_is_released_when_another_stops() {
    // Partition 0 spins in a loop while partition 1 waits at the all-reduce.
    let file = "one_device_spins.hlo";
    let (e, _) = run_watched(file, steps(500));
    assert_eq!(
        stopped(&e),
        (&StopReason::Steps(500), Some("while.30"), "spin.1")
    );
    let (e, _) = run_watched(
        file,
        RunLimits::default().with_timeout(Some(Duration::from_millis(100))),
    );
    assert!(matches!(stopped(&e).0, StopReason::Timeout(_)), "{e}");
    assert_eq!(stopped(&e).1, Some("while.30"));
}

#[test]
fn the_device_level_entry_point_takes_limits_too() {
    let m = module("never_ending_all_reduce.hlo");
    let args: Vec<Vec<Value>> = vec![Vec::new(), Vec::new()];
    let e = tpusim_interp::execute_devices_limited(&m, args, u64::MAX, &steps(64)).unwrap_err();
    assert_eq!(stopped(&e).0, &StopReason::Steps(64));
}
