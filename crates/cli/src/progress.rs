//! A spinner for work that takes longer than a second (on a terminal only:
//! indicatif draws nothing when stderr is not a TTY, so pipes and CI stay clean).

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::mpsc;
use std::time::Duration;

/// Work shorter than this shows no spinner at all.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// Runs `work`, showing `label` with a spinner on stderr once it has run for a second.
pub fn with_spinner<T>(label: &str, work: impl FnOnce() -> T) -> T {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            if done_rx.recv_timeout(QUIET_FOR).is_ok() {
                return;
            }
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(100));
            let _ = done_rx.recv();
            bar.finish_and_clear();
        });
        let result = work();
        let _ = done_tx.send(());
        result
    })
}
