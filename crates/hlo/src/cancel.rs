//! [`Cancel`]: the interrupt flag a front end (a Ctrl-C handler, Python's
//! signal check, another thread) sets to stop long work in the core crates.
//!
//! It is the same `Arc<AtomicBool>` the interpreter's `RunLimits::interrupt`
//! holds, so one flag stops a whole command: partitioning, the compiler
//! passes, the analysis walk and schedule replay, the pod network simulation
//! and the interpreter. The flag is sticky (nothing clears it), which lets a
//! long loop simply stop early when it sees the flag set: the function that
//! started the work checks the flag again before returning and fails with
//! [`Cancelled`], so a result cut short is never handed out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A shared interrupt flag. The default is a fresh flag nobody sets.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

/// The work stopped because its [`Cancel`] flag was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("interrupted")]
pub struct Cancelled;

impl Cancel {
    /// A handle on an existing flag (e.g. `RunLimits::interrupt`).
    pub fn from_flag(flag: Arc<AtomicBool>) -> Cancel {
        Cancel(flag)
    }

    /// The flag itself, to share with code that takes an `Arc<AtomicBool>`.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }

    /// Sets the flag: every holder stops at its next check.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the flag is set (one relaxed load: cheap enough per step).
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(Cancelled)` once the flag is set.
    pub fn check(&self) -> Result<(), Cancelled> {
        if self.0.load(Ordering::SeqCst) {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_flag_is_seen_by_every_clone_and_the_shared_flag() {
        let c = Cancel::default();
        let d = c.clone();
        let shared = Cancel::from_flag(c.flag());
        assert_eq!(d.check(), Ok(()));
        c.cancel();
        assert!(d.is_cancelled());
        assert_eq!(shared.check(), Err(Cancelled));
        assert!(!Cancel::default().is_cancelled());
    }
}
