//! The executor on the host device with real data: every rank's output against the
//! reference (block `s` is rank `s`'s input), zero-copy and staged through CCL buffers
//! small enough that the larger counts take several loop iterations, in and out of place.

use oxccl::{Communicator, Config, Element, OpKind};
use oxccl_plugin_template::NAME;
use std::fmt::Debug;

/// A CCL buffer of 64 KiB: 5000 f32 per rank on 4 ranks fill it more than once.
const CCL_BYTES: usize = 64 << 10;

fn communicators(ranks: usize, zero_copy: bool) -> Vec<Communicator> {
    let mut config = Config {
        ccl_buffer_bytes: CCL_BYTES,
        zero_copy,
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllGather), NAME);
    Communicator::init_all(ranks, config).expect("host communicators")
}

/// Every rank gathers `count` elements of `value(rank, i)`; each rank's output must be
/// the concatenation of every rank's input.
fn gather_and_compare<T: Element + PartialEq + Debug>(
    ranks: usize,
    count: usize,
    zero_copy: bool,
    in_place: bool,
    value: fn(usize, usize) -> T,
) {
    let reference: Vec<T> = (0..ranks)
        .flat_map(|r| (0..count).map(move |i| value(r, i)))
        .collect();
    let comms = communicators(ranks, zero_copy);
    let outputs: Vec<Vec<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let rank = comm.rank();
                    let send: Vec<T> = (0..count).map(|i| value(rank, i)).collect();
                    let mut recv = vec![value(ranks, 0); ranks * count];
                    if in_place {
                        recv[rank * count..(rank + 1) * count].copy_from_slice(&send);
                        comm.all_gather_in_place(&mut recv)
                    } else {
                        comm.all_gather(&send, &mut recv)
                    }
                    .expect("all_gather");
                    recv
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, output) in outputs.iter().enumerate() {
        assert!(
            *output == reference,
            "{ranks} ranks, count {count}, zero_copy {zero_copy}, in_place {in_place}: \
             rank {rank} differs from the reference"
        );
    }
}

#[test]
fn gathers_exactly_the_reference_on_the_host_device() {
    for ranks in [1, 2, 3, 4, 8] {
        for count in [0, 1, 7, 5000] {
            for zero_copy in [true, false] {
                for in_place in [false, true] {
                    gather_and_compare(ranks, count, zero_copy, in_place, |r, i| {
                        (r * 1_000_003 + i) as f32
                    });
                }
            }
        }
    }
}

#[test]
fn gathers_bytes_and_odd_sizes() {
    for ranks in [3, 5] {
        for zero_copy in [true, false] {
            gather_and_compare(ranks, 70_001, zero_copy, false, |r, i| {
                (r as u8).wrapping_mul(31).wrapping_add(i as u8)
            });
        }
    }
}
