//! Gates: a launch that starts only once something outside the device has decided.
//!
//! The framework gives every rank's execution of one call the same [`Gate`] while the ranks
//! compare what they were asked to do (see the framework's `agreement`). A device that
//! gets a gated execution registers it and returns to waiting for it as for any launch,
//! but starts no stream until the gate opens; a failed gate ends the launch with
//! [`DeviceError::Refused`](crate::DeviceError::Refused) before any task ran, so nothing
//! moved and no notify changed. The check thus costs no thread a wake-up of its own: the
//! thread that decides opens the gate, which queues every waiting launch at once.
//!
//! Memory ordering: the decision and the callbacks it runs go through the gate's mutex, so
//! whatever the deciding thread wrote before deciding is visible to the callbacks, and a
//! callback registered after the decision runs at once on the registering thread.

use crate::error::GateRefusal;
use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// What runs when the gate is decided: `Ok` to start, `Err(cause)` to refuse (the cause is
/// the decider's error, kept typed).
pub type GateCallback = Box<dyn FnOnce(Result<(), GateRefusal>) + Send>;

enum State {
    Pending(Vec<GateCallback>),
    Decided(Result<(), GateRefusal>),
}

/// A one-shot decision that launches wait for.
pub struct Gate {
    state: Mutex<State>,
    decided: Condvar,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("decided", &self.outcome())
            .finish()
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            state: Mutex::new(State::Pending(Vec::new())),
            decided: Condvar::new(),
        }
    }
}

impl Gate {
    /// Decide: run every waiting callback with `outcome` (a second decision is ignored).
    pub fn decide(&self, outcome: Result<(), GateRefusal>) {
        let waiting = {
            let mut state = self.state.lock();
            match &mut *state {
                State::Decided(_) => return,
                State::Pending(waiting) => {
                    let waiting = std::mem::take(waiting);
                    *state = State::Decided(outcome.clone());
                    waiting
                }
            }
        };
        self.decided.notify_all();
        for callback in waiting {
            callback(outcome.clone());
        }
    }

    /// Run `callback` when the gate is decided: now, on this thread, if it already is.
    pub fn when_decided(&self, callback: GateCallback) {
        let outcome = {
            let mut state = self.state.lock();
            match &mut *state {
                State::Pending(waiting) => {
                    waiting.push(callback);
                    return;
                }
                State::Decided(outcome) => outcome.clone(),
            }
        };
        callback(outcome);
    }

    /// The decision, if made.
    pub fn outcome(&self) -> Option<Result<(), GateRefusal>> {
        match &*self.state.lock() {
            State::Pending(_) => None,
            State::Decided(outcome) => Some(outcome.clone()),
        }
    }

    /// Block until the gate is decided or `timeout` passes (`None`).
    pub fn wait(&self, timeout: Duration) -> Option<Result<(), GateRefusal>> {
        let deadline = deadline_after(timeout);
        let mut state = self.state.lock();
        loop {
            if let State::Decided(outcome) = &*state {
                return Some(outcome.clone());
            }
            if self.decided.wait_until(&mut state, deadline).timed_out() {
                return None;
            }
        }
    }
}

/// `timeout` from now, saturating: a timeout too long for the clock (`Duration::MAX`)
/// waits as long as the clock can count instead of panicking.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    let mut timeout = timeout;
    loop {
        if let Some(deadline) = now.checked_add(timeout) {
            return deadline;
        }
        timeout /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn refusal(text: &str) -> GateRefusal {
        Arc::new(std::io::Error::other(text.to_string()))
    }

    #[test]
    fn callbacks_run_once_with_the_decision_whenever_registered() {
        let gate = Gate::default();
        let opened = Arc::new(AtomicUsize::new(0));
        let counter = |n: &Arc<AtomicUsize>| {
            let n = n.clone();
            Box::new(move |r: Result<(), GateRefusal>| {
                assert!(r.is_ok());
                n.fetch_add(1, Ordering::Relaxed);
            }) as GateCallback
        };
        gate.when_decided(counter(&opened));
        assert_eq!(opened.load(Ordering::Relaxed), 0);
        assert!(gate.wait(Duration::from_millis(1)).is_none());
        gate.decide(Ok(()));
        gate.decide(Err(refusal("too late")));
        gate.when_decided(counter(&opened));
        assert_eq!(opened.load(Ordering::Relaxed), 2);
        assert!(matches!(gate.wait(Duration::from_millis(1)), Some(Ok(()))));
        assert!(
            matches!(gate.wait(Duration::MAX), Some(Ok(()))),
            "no overflow"
        );
        assert!(deadline_after(Duration::MAX) > Instant::now());
    }

    #[test]
    fn a_refusal_reaches_waiters() {
        let gate = Arc::new(Gate::default());
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.wait(Duration::from_secs(20)))
        };
        gate.decide(Err(refusal("rank 2 passed count 10")));
        let Some(Err(cause)) = waiter.join().unwrap() else {
            panic!("the waiter did not see the refusal");
        };
        assert_eq!(cause.to_string(), "rank 2 passed count 10");
    }
}
