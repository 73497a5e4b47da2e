//! The bidirectional-ring plugin follows the ring order it is given, so it runs where a
//! link is broken. (Its own test binary: it sets the plugin's environment variable.)

use oxccl::{Communicator, Config, Error, OpKind, ReduceOp, Topology};
use oxccl_plugin_bidir_ring::ORDER_VAR;

fn contest_comms(algo: &str) -> Vec<Communicator> {
    let topology = Topology::single_server(8).with_broken(0, 1).unwrap();
    let mut config = Config {
        topology: Some(topology),
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), algo);
    Communicator::init_all(8, config).unwrap()
}

#[test]
fn twisted_order_avoids_the_broken_link() {
    std::env::set_var(ORDER_VAR, "1,2,3,4,5,6,0,7");
    let comms = contest_comms("bidir-ring");
    let results: Vec<Vec<f32>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let send: Vec<f32> = (0..100_003)
                        .map(|i| (i % 7) as f32 + c.rank() as f32)
                        .collect();
                    let mut recv = vec![0.0; send.len()];
                    c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                    recv
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: Vec<f32> = (0..100_003).map(|i| 8.0 * (i % 7) as f32 + 28.0).collect();
    assert!(results.iter().all(|r| *r == want));

    // The natural order would cross the broken 0-1 link.
    std::env::set_var(ORDER_VAR, "0,1,2,3,4,5,6,7");
    let comms = contest_comms("bidir-ring");
    let err = comms[0]
        .all_reduce(&[1.0f32; 8], &mut [0.0f32; 8], ReduceOp::Sum)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NoLink {
                rank: 0,
                peer: 1,
                ..
            }
        ),
        "{err:?}"
    );

    std::env::set_var(ORDER_VAR, "0,1,2");
    let err = contest_comms("bidir-ring")[3]
        .all_reduce(&[1.0f32; 8], &mut [0.0f32; 8], ReduceOp::Sum)
        .unwrap_err();
    assert!(err.to_string().contains("not a permutation"), "{err}");
}
