//! The harness for Barrier: ten barriers in a row on every rank, a different rank late
//! each time, and nobody may leave a barrier before everyone entered it.

use crate::Setup;
use oxccl::{Communicator, OpKind, OpParam, UserBuffers};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn barrier(comm: &Communicator) -> Result<(), String> {
    let mut none: [u8; 0] = [];
    comm.execute(&OpParam::barrier(), UserBuffers::InPlace(&mut none))
        .map_err(|e| format!("rank {}: {e}", comm.rank()))
}

/// Ten barriers in a row; before each, every rank counts itself in, and after it every rank
/// must see all the counts of that barrier (the late rank sleeps before entering).
pub fn run_barriers(setup: &Setup) -> Result<(), String> {
    let n = setup.topology.ranks();
    let comms = Communicator::init_all(n, setup.config_for(OpKind::Barrier))
        .map_err(|e| format!("{setup:?}: init: {e}"))?;
    let entered = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                let entered = &entered;
                s.spawn(move || -> Result<(), String> {
                    for round in 0..10 {
                        if comm.rank() == round % n {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        entered.fetch_add(1, Ordering::SeqCst);
                        barrier(comm)?;
                        let seen = entered.load(Ordering::SeqCst);
                        if seen < (round + 1) * n {
                            return Err(format!(
                                "{:?} on {n} ranks: rank {} left barrier {round} after {seen} entries",
                                setup.topology.server_sizes(),
                                comm.rank()
                            ));
                        }
                        barrier(comm)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("rank thread panicked"))
    })
}
