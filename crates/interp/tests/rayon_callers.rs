//! `run_global` called from inside a rayon pool: the device threads' kernels
//! queue work on that pool, so a caller that only blocked on them could leave
//! no worker to run it. Every run here must finish (a watchdog fails the test
//! instead of hanging it).

use std::sync::mpsc;
use std::time::Duration;
use tpusim_interp::{GlobalRun, Value};

const MODULE: &str = r#"HloModule two_devices, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[512,512] parameter(0), sharding={replicated}
  d = f32[512,512] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[512,512] all-reduce(d), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add, sharding={replicated}
}
"#;

#[test]
fn runs_from_inside_a_busy_rayon_pool_finish() {
    let m = tpusim_hlo::parse_module(MODULE).expect("parses");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // As many runs as the global pool has workers, all at once: every
        // worker waits on device threads whose kernels queue work on that
        // same pool.
        use rayon::prelude::*;
        let runs = rayon::current_num_threads() * 2;
        let results: Vec<bool> = (0..runs)
            .into_par_iter()
            .map(|k| {
                let x = tpusim_interp::npz::random_args(&m.entry_parameter_shapes(), k as u64)
                    .expect("inputs");
                let out: Vec<Value> =
                    tpusim_interp::run_global(&m, x, &GlobalRun::default()).expect("runs");
                out.len() == 1
            })
            .collect();
        let _ = tx.send(results);
    });
    let results = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("runs inside a rayon pool finished");
    assert!(!results.is_empty() && results.iter().all(|&ok| ok));
}
