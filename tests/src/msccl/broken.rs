//! Files broken on purpose, each from a small correct one with one thing changed.
//!
//! The first eight break a rule of the format, and the importer must refuse them with an
//! error containing [`Broken::verdict`]'s keyword (lower case, exactly): `malformed`,
//! `unknown step type`, `owned by two threadblocks`, `do not balance`, `hasdep`, `cycle`,
//! `outside`, `ngpus`. The last three are well-formed, so they import, but compute the
//! wrong thing: a wrong chunk offset (`wrong result`), a missing dependency between two
//! threadblocks that touch the same chunk (`race`), and a reduction that counts a
//! contribution twice (`double-counted`); [`super::simulate::check`] (and the analyzer)
//! must reject them with those keywords.

use super::xml::{Program, StepRef, Ty};
use super::{all_pairs, ring, Coll, Params, Verdict};

/// A broken file.
#[derive(Clone, Debug)]
pub struct Broken {
    pub name: &'static str,
    pub coll: Coll,
    pub ranks: usize,
    pub nchannels: usize,
    pub xml: String,
    pub verdict: Verdict,
}

fn ring_all_reduce_4() -> Program {
    ring::all_reduce_program(&Params::new(4))
}

fn all_pairs_all_reduce_4() -> Program {
    all_pairs::all_reduce_program(&Params::new(4))
}

/// The all-pairs AllReduce's local (reducing) threadblock on gpu 0 and its steps: `cpy`,
/// `nop`, `re` (slot into slot), `re` (slot into output), `re` (last slot into output).
fn local_tb(prog: &Program) -> usize {
    let tb = prog.gpus[0]
        .tbs
        .iter()
        .position(|t| t.send.is_none() && t.recv.is_none())
        .unwrap();
    let types: Vec<Ty> = prog.gpus[0].tbs[tb].steps.iter().map(|s| s.ty).collect();
    assert_eq!(types, [Ty::Cpy, Ty::Nop, Ty::Re, Ty::Re, Ty::Re]);
    tb
}

fn replace_once(xml: &str, from: &str, to: &str) -> String {
    assert!(xml.contains(from), "{from:?} is not in the file");
    xml.replacen(from, to, 1)
}

fn file(name: &'static str, prog: &Program, xml: String, verdict: Verdict) -> Broken {
    Broken {
        name,
        coll: prog.coll,
        ranks: prog.ranks(),
        nchannels: prog.nchannels,
        xml,
        verdict,
    }
}

/// Malformed XML: a closing tag that does not match (4-rank ring AllReduce).
pub fn malformed() -> Broken {
    let prog = ring_all_reduce_4();
    let xml = replace_once(&prog.to_xml(), "</tb>", "</threadblock>");
    file(
        "broken-malformed.xml",
        &prog,
        xml,
        Verdict::Rejected("malformed"),
    )
}

/// A step of type `xfer` (4-rank ring AllReduce, its first `rrs`).
pub fn unknown_step_type() -> Broken {
    let prog = ring_all_reduce_4();
    let xml = replace_once(&prog.to_xml(), "type=\"rrs\"", "type=\"xfer\"");
    file(
        "broken-unknown-step-type.xml",
        &prog,
        xml,
        Verdict::Rejected("unknown step type"),
    )
}

/// Gpu 0 of a 4-rank all-pairs AllGather sends to gpu 1 from a second threadblock, so
/// (channel 0, send peer 1) has two owners; sends and receives still balance.
pub fn two_owners() -> Broken {
    let mut prog = all_pairs::all_gather_program(&Params::new(4));
    let gpu = &mut prog.gpus[0];
    let t = gpu.tbs.iter().position(|t| t.send == Some(1)).unwrap();
    let k = gpu.tbs[t].steps.iter().position(|s| s.ty == Ty::S).unwrap();
    let step = gpu.tbs[t].steps.remove(k);
    let mut extra = gpu.tbs[t].clone();
    extra.recv = None;
    extra.steps = vec![step];
    gpu.tbs.push(extra);
    let xml = prog.to_xml();
    file(
        "broken-two-owners.xml",
        &prog,
        xml,
        Verdict::Rejected("owned by two threadblocks"),
    )
}

/// Gpu 0 of a 4-rank ring AllReduce lacks its last receive: gpu 3 sends once more than
/// gpu 0 receives.
pub fn unbalanced() -> Broken {
    let mut prog = ring_all_reduce_4();
    let last = prog.gpus[0].tbs[0].steps.pop().unwrap();
    assert_eq!(last.ty, Ty::R);
    let xml = prog.to_xml();
    file(
        "broken-unbalanced.xml",
        &prog,
        xml,
        Verdict::Rejected("do not balance"),
    )
}

/// 4-rank all-pairs AllReduce whose last `re` on gpu 0, which the second sends depend
/// on, says hasdep="0".
pub fn missing_hasdep() -> Broken {
    let mut prog = all_pairs_all_reduce_4();
    let local = local_tb(&prog);
    prog.gpus[0].tbs[local].steps[4].hasdep = Some(false);
    let xml = prog.to_xml();
    file("broken-hasdep.xml", &prog, xml, Verdict::Rejected("hasdep"))
}

/// 4-rank all-pairs AllReduce where gpu 0's first send to a peer waits for the last
/// `re`, which waits (through the local threadblock's order) for the receive after that
/// very send.
pub fn cycle() -> Broken {
    let mut prog = all_pairs_all_reduce_4();
    let local = local_tb(&prog);
    let peer = prog.gpus[0]
        .tbs
        .iter()
        .position(|t| t.send.is_some())
        .unwrap();
    let first = &mut prog.gpus[0].tbs[peer].steps[0];
    assert!(first.ty == Ty::S && first.dep.is_none());
    first.dep = Some(StepRef { tb: local, step: 4 });
    let xml = prog.to_xml();
    file("broken-cycle.xml", &prog, xml, Verdict::Rejected("cycle"))
}

/// 4-rank ring AllReduce whose first send on gpu 0 reads input chunk 4 of 4.
pub fn outside() -> Broken {
    let mut prog = ring_all_reduce_4();
    let chunks = prog.gpus[0].i_chunks;
    let first = &mut prog.gpus[0].tbs[0].steps[0];
    assert_eq!(first.ty, Ty::S);
    first.src.off = chunks;
    let xml = prog.to_xml();
    file(
        "broken-outside.xml",
        &prog,
        xml,
        Verdict::Rejected("outside"),
    )
}

/// 4-rank ring AllReduce that says ngpus="5".
pub fn ngpus() -> Broken {
    let mut prog = ring_all_reduce_4();
    prog.ngpus_attr = Some(5);
    let xml = prog.to_xml();
    file("broken-ngpus.xml", &prog, xml, Verdict::Rejected("ngpus"))
}

/// 4-rank ring AllReduce whose first send on gpu 0 reads input chunk 1 instead of 0:
/// chunk 0 ends without gpu 0's contribution and with its chunk 1's.
pub fn wrong_offset() -> Broken {
    let mut prog = ring_all_reduce_4();
    let first = &mut prog.gpus[0].tbs[0].steps[0];
    assert!(first.ty == Ty::S && first.src.off == 0);
    first.src.off = 1;
    let xml = prog.to_xml();
    file(
        "wrong-offset.xml",
        &prog,
        xml,
        Verdict::Wrong("wrong result"),
    )
}

/// 4-rank all-pairs AllReduce whose last `re` on gpu 0 does not wait for the receive
/// into the scratch slot it reads.
pub fn race() -> Broken {
    let mut prog = all_pairs_all_reduce_4();
    let local = local_tb(&prog);
    let last = &mut prog.gpus[0].tbs[local].steps[4];
    assert!(last.dep.is_some());
    last.dep = None;
    let xml = prog.to_xml();
    file("wrong-race.xml", &prog, xml, Verdict::Wrong("race"))
}

/// 4-rank all-pairs AllReduce whose last `re` on gpu 0 adds the first scratch slot
/// (which already holds two peers' shares and was already added) instead of the third.
pub fn double_count() -> Broken {
    let mut prog = all_pairs_all_reduce_4();
    let local = local_tb(&prog);
    let first_slot = prog.gpus[0].tbs[local].steps[2].dst.unwrap();
    prog.gpus[0].tbs[local].steps[4].src = first_slot;
    let xml = prog.to_xml();
    file(
        "wrong-double-count.xml",
        &prog,
        xml,
        Verdict::Wrong("double-counted"),
    )
}

/// All of them, the importer's eight first.
pub fn all() -> Vec<Broken> {
    vec![
        malformed(),
        unknown_step_type(),
        two_owners(),
        unbalanced(),
        missing_hasdep(),
        cycle(),
        outside(),
        ngpus(),
        wrong_offset(),
        race(),
        double_count(),
    ]
}
