//! Resource limits of one execution: a step budget, a deadline and an interrupt
//! flag, shared by every simulated device.
//!
//! A *step* is one instruction the interpreter evaluates, in any computation
//! (entry, `while` condition and body, `call`, reducers and comparators applied
//! per element, fusion bodies) on any device: the budget is the sum over all
//! devices. A fused elementwise chain evaluated tile by tile counts as one step.
//! Every `while` iteration evaluates at least its condition's parameter and
//! root, so a loop that never ends always exhausts the budget.
//!
//! Checks are cheap: an atomic add per step when a step budget is set, two
//! relaxed loads per step (the interrupt flag, "another device stopped"), and
//! the clock only every [`CLOCK_EVERY`] steps of a device. A single kernel (one
//! large convolution, say) is never interrupted midway: the limit trips at the
//! next instruction.
//!
//! The first device to trip records why and where, raises a flag the other
//! devices see at their next step, and aborts the rendezvous so that devices
//! waiting at a collective return at once; the run then fails with that first
//! device's [`InterpError::Stopped`].

use crate::InterpError;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many steps a device evaluates between two looks at the clock.
pub const CLOCK_EVERY: u64 = 64;

/// Limits a caller puts on one run. The default has none (and a fresh,
/// never-set interrupt flag).
#[derive(Clone, Debug, Default)]
pub struct RunLimits {
    /// Most steps (instructions evaluated, summed over all devices) the run may take.
    pub max_steps: Option<u64>,
    /// Time after which the run stops.
    pub deadline: Option<Instant>,
    /// The timeout `deadline` was set from (by `with_timeout`): a timed-out
    /// run reports the time since `deadline - timeout`, so the figure is
    /// never below the timeout asked for.
    pub timeout: Option<Duration>,
    /// Set from anywhere (a Ctrl-C handler, another thread) to stop the run.
    pub interrupt: Arc<AtomicBool>,
}

impl RunLimits {
    /// Limits with a deadline `timeout` from now (none when `timeout` is `None`
    /// or too large to represent).
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> RunLimits {
        self.deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        self.timeout = timeout.filter(|_| self.deadline.is_some());
        self
    }
}

/// Why a run stopped before finishing.
#[derive(Clone, Debug, PartialEq)]
pub enum StopReason {
    /// The step budget (this many steps) was used up.
    Steps(u64),
    /// The deadline passed; the run had been executing this long.
    Timeout(Duration),
    /// The interrupt flag was set.
    Interrupted,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Steps(n) => write!(f, "stopped after {n} steps"),
            StopReason::Timeout(d) => write!(f, "timed out after {:.3} s", d.as_secs_f64()),
            StopReason::Interrupted => write!(f, "interrupted"),
        }
    }
}

/// What to raise, for the message: the CLI flag and the Python keyword.
pub(crate) fn hint(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::Steps(_) => ": raise --max-steps (Python: max_steps=)",
        StopReason::Timeout(_) => ": raise --timeout (Python: timeout=)",
        StopReason::Interrupted => "",
    }
}

/// Where the execution stood when it stopped, for [`InterpError::Stopped`].
pub(crate) fn place(loop_name: &Option<String>, computation: &str) -> String {
    match loop_name {
        Some(l) => format!(" in while loop '{l}' (computation '{computation}')"),
        None => format!(" in computation '{computation}' (no while loop running)"),
    }
}

/// The first stop of a run: its reason and place.
#[derive(Clone)]
struct Stop {
    reason: StopReason,
    loop_name: Option<String>,
    computation: String,
}

impl Stop {
    fn error(self) -> InterpError {
        InterpError::Stopped {
            reason: self.reason,
            loop_name: self.loop_name,
            computation: self.computation,
        }
    }
}

/// The live state of [`RunLimits`] during one run, shared by all device threads.
pub(crate) struct Budget<'a> {
    limits: &'a RunLimits,
    steps: AtomicU64,
    started: Instant,
    /// Set once any device has stopped on a limit.
    stopped: AtomicBool,
    first: Mutex<Option<Stop>>,
}

impl<'a> Budget<'a> {
    pub(crate) fn new(limits: &'a RunLimits) -> Budget<'a> {
        Budget {
            limits,
            steps: AtomicU64::new(0),
            started: Instant::now(),
            stopped: AtomicBool::new(false),
            first: Mutex::new(None),
        }
    }

    /// Counts one step of a device (`ticks` is that device's own step count)
    /// and says whether the run must stop: `Some(None)` when another device
    /// stopped it, `Some(Some(reason))` when this step trips a limit.
    pub(crate) fn tick(&self, ticks: &std::cell::Cell<u64>) -> Option<Option<StopReason>> {
        let t = ticks.get().wrapping_add(1);
        ticks.set(t);
        if self.stopped.load(Ordering::Relaxed) {
            return Some(None);
        }
        if let Some(max) = self.limits.max_steps {
            if self.steps.fetch_add(1, Ordering::Relaxed) >= max {
                return Some(Some(StopReason::Steps(max)));
            }
        }
        if self.limits.interrupt.load(Ordering::Relaxed) {
            return Some(Some(StopReason::Interrupted));
        }
        if t.is_multiple_of(CLOCK_EVERY) {
            if let Some(deadline) = self.limits.deadline {
                if Instant::now() >= deadline {
                    let origin = self
                        .limits
                        .timeout
                        .and_then(|timeout| deadline.checked_sub(timeout))
                        .unwrap_or(self.started);
                    return Some(Some(StopReason::Timeout(origin.elapsed())));
                }
            }
        }
        None
    }

    /// Records a stop (the first one wins), raises the flag for the other
    /// devices and returns the run's error: the first stop's.
    pub(crate) fn trip(
        &self,
        reason: Option<StopReason>,
        loop_name: Option<String>,
        computation: &str,
    ) -> InterpError {
        let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(Stop {
                // A follower without a recorded stop cannot happen (the flag is
                // raised after recording); say "interrupted" rather than panic.
                reason: reason.unwrap_or(StopReason::Interrupted),
                loop_name,
                computation: computation.to_string(),
            });
        }
        self.stopped.store(true, Ordering::Relaxed);
        first.clone().map_or_else(
            || InterpError::Internal("stop not recorded".into()),
            Stop::error,
        )
    }

    /// The error of the first stop, if any device stopped.
    pub(crate) fn stopped(&self) -> Option<InterpError> {
        let first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        first.clone().map(Stop::error)
    }
}
