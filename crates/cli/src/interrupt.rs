//! Ctrl-C: one process-wide interrupt flag, set by a handler installed the
//! first time a command asks for it. The same flag is the interpreter's
//! `RunLimits::interrupt` (`run`) and, as a `tpusim_hlo::Cancel`, the cancel
//! handle of the partitioner, the compiler passes, the analysis, the pod
//! network simulation and the trace views (`analyze`, `trace`, `compile`,
//! `partition`). `main` turns an interrupted command into exit code 130.

use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tpusim_hlo::Cancel;

/// A command stopped by Ctrl-C: `main` prints the message and exits 130.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The flag Ctrl-C sets from now on in this process (the handler is installed
/// once; before that, Ctrl-C ends the process as usual).
pub fn flag() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let set = flag.clone();
        // If a handler cannot be installed, Ctrl-C keeps its default effect
        // (the process ends at once), which is still an interruption.
        let _ = ctrlc::set_handler(move || set.store(true, Ordering::SeqCst));
        flag
    })
    .clone()
}

/// The flag as the core crates' cancel handle (installs the handler).
pub fn cancel() -> Cancel {
    Cancel::from_flag(flag())
}

/// Fails with [`Interrupted`] once Ctrl-C was pressed.
pub fn check(flag: &AtomicBool) -> Result<()> {
    if flag.load(Ordering::SeqCst) {
        return Err(Interrupted("interrupted".into()).into());
    }
    Ok(())
}

/// Whether `e` (anywhere in its chain) says the work was interrupted: the
/// CLI's own [`Interrupted`], or a core crate's typed `Cancelled`.
pub fn is_interrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<Interrupted>()
            || c.is::<tpusim_hlo::Cancelled>()
            || matches!(
                c.downcast_ref(),
                Some(tpusim_compile::CompileError::Cancelled(_))
            )
            || matches!(c.downcast_ref(), Some(tpusim_spmd::SpmdError::Cancelled(_)))
            || matches!(
                c.downcast_ref(),
                Some(tpusim_views::ViewsError::Cancelled(_))
            )
    })
}
