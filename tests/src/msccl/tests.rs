//! The generators against the reference interpreter, the catalogue's coverage, the broken
//! files' verdicts, and the files checked in under `tests/msccl/`.

use super::simulate::{self, check, check_with, ErrorKind, Options, Report};
use super::xml::{Buf, Ty};
use super::*;
use std::collections::BTreeSet;
use std::time::Instant;

/// Every check a correct file must pass: the interpreter in three orders, FIFOs of 8
/// messages (NCCL's NCCL_STEPS slots a connection; a ring's fused steps hold the message
/// they received while they wait to send theirs, so a ring that sends k pieces a stage
/// needs k + 1), and nothing touched that the collective leaves unused.
fn must_pass(name: &str, xml: &str) -> Report {
    let options = Options {
        seeds: vec![7, 1234],
        fifo_capacity: Some(8),
    };
    let report = check_with(xml, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        report.unused_touched.is_empty(),
        "{name}: {:?}",
        report.unused_touched
    );
    strict_fields(name, xml);
    report
}

/// What the generators promise beyond the format's rules: every offset a step names,
/// informational ones included, lies inside its buffer (the destination of `s` and `rrs`
/// is the receiver's, which the interpreter checks equals its receive's); every
/// threadblock has steps;
/// `nop` steps move nothing; every tb is on a channel the file has.
fn strict_fields(name: &str, xml: &str) {
    let algo = simulate::parse(xml).unwrap();
    for gpu in &algo.gpus {
        for tb in &gpu.tbs {
            assert!(
                !tb.steps.is_empty(),
                "{name}: gpu {} tb {} is empty",
                gpu.id,
                tb.id
            );
            assert!(tb.chan < algo.nchannels);
            for step in &tb.steps {
                if step.ty == Ty::Nop {
                    assert_eq!(step.cnt, 0, "{name}");
                    continue;
                }
                let fields = if step.ty.remote_dst() {
                    vec![step.src]
                } else {
                    vec![step.src, step.dst]
                };
                for (buf, off) in fields {
                    let size = match buf {
                        Buf::I => gpu.i_chunks,
                        Buf::O => gpu.o_chunks,
                        Buf::S => gpu.s_chunks,
                    };
                    assert!(
                        off + step.cnt <= size,
                        "{name}: gpu {} tb {} step {}: {}[{off}..+{}] of {size}",
                        gpu.id,
                        tb.id,
                        step.s,
                        buf.code(),
                        step.cnt
                    );
                }
            }
        }
    }
}

#[test]
fn every_catalogue_file_computes_its_collective() {
    let files = correct_files();
    assert_eq!(files.len(), 8 * 2 * 3 + 2 * 3);
    for f in &files {
        let report = must_pass(&f.name, &f.xml);
        assert_eq!(report.coll, f.coll, "{}", f.name);
        assert_eq!(report.ngpus, f.ranks, "{}", f.name);
        assert_eq!(report.nchannels, f.nchannels, "{}", f.name);
        assert_eq!(format!("{}.xml", report.name), f.name);
        assert_eq!(f.verdict, Verdict::Pass);
    }
}

#[test]
fn the_catalogue_covers_every_shape() {
    let files = correct_files();
    let names: BTreeSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
    for coll in Coll::ALL {
        for form in [Form::Ring, Form::AllPairs] {
            for n in [4, 8, 16] {
                let name = format!("{}-{}-{n}.xml", coll.stem(), form.label());
                assert!(names.contains(name.as_str()), "{name}");
            }
        }
    }
    for coll in [Coll::AllReduce, Coll::AllGather] {
        for n in [4, 8, 16] {
            let name = format!("{}-hierarchical-{n}.xml", coll.stem());
            assert!(names.contains(name.as_str()), "{name}");
        }
    }
    for coll in Coll::ALL {
        for form in [Form::Ring, Form::AllPairs, Form::Hierarchical] {
            for n in [4, 8, 16] {
                if let Some(prog) = program(coll, form, &catalogue_params(coll, form, n)) {
                    assert_eq!(prog.unresolved(), 0, "{}", prog.name);
                }
            }
        }
    }
    let reports: Vec<Report> = files.iter().map(|f| check(&f.xml).unwrap()).collect();
    let types: BTreeSet<Ty> = reports.iter().flat_map(|r| r.step_types.clone()).collect();
    assert_eq!(
        types,
        Ty::ALL.into_iter().collect(),
        "every step type occurs"
    );
    let channels: BTreeSet<usize> = reports.iter().map(|r| r.nchannels).collect();
    assert!(
        channels.contains(&1) && channels.contains(&2),
        "{channels:?}"
    );
    assert!(reports
        .iter()
        .any(|r| r.cross_tb_deps && r.max_tbs_per_gpu > 1));
    assert!(reports
        .iter()
        .any(|r| r.uses_scratch && r.step_types.contains(&Ty::Re)));
    // Both dialects, and a byte range.
    let texts: Vec<&str> = files.iter().map(|f| f.xml.as_str()).collect();
    assert!(texts.iter().any(|t| t.contains("coll=\"reduce_scatter\"")));
    assert!(texts.iter().any(|t| t.contains("coll=\"reducescatter\"")));
    assert!(texts.iter().any(|t| t.contains("outofplace=\"1\"")));
    assert!(texts
        .iter()
        .any(|t| !t.contains("outofplace") && !t.contains("minBytes")));
    assert!(texts.iter().any(|t| t.contains("maxBytes=\"1073741824\"")));
    assert!(texts.iter().any(|t| t.contains(" root=\"")));
    // A threadblock that waits for two others through a nop: a nop depending on one
    // threadblock, and the step after it on another.
    let waits_for_two = files.iter().any(|f| {
        let algo = simulate::parse(&f.xml).unwrap();
        algo.gpus.iter().flat_map(|g| &g.tbs).any(|tb| {
            tb.steps.windows(2).any(|w| {
                w[0].ty == Ty::Nop
                    && matches!((w[0].dep, w[1].dep), (Some(a), Some(b)) if a.0 != b.0 && a.0 != tb.id && b.0 != tb.id)
            })
        })
    });
    assert!(waits_for_two);
}

/// Other shapes than the catalogue's: odd rank counts, three channels, three chunks a
/// piece, one step per chunk, other roots, three nodes.
#[test]
fn generators_hold_for_other_parameters() {
    for coll in Coll::ALL {
        for (ranks, channels, factor, pipeline, root) in [
            (2, 1, 1, false, 1),
            (3, 3, 2, true, 2),
            (5, 2, 3, false, 4),
            (6, 1, 1, true, 0),
        ] {
            for form in [Form::Ring, Form::AllPairs] {
                let p = Params::new(ranks)
                    .channels(channels)
                    .factor(factor)
                    .pipeline(pipeline)
                    .root(root)
                    .dialect(Dialect::Rccl);
                let xml = generate(coll, form, &p).unwrap();
                must_pass(&format!("{coll:?} {form:?} {p:?}"), &xml);
            }
        }
    }
    for coll in [Coll::AllReduce, Coll::AllGather] {
        for (ranks, nodes, channels, factor) in
            [(6, 3, 1, 2), (6, 2, 3, 1), (12, 3, 2, 1), (9, 3, 1, 1)]
        {
            let p = Params::new(ranks)
                .nodes(nodes)
                .channels(channels)
                .factor(factor);
            let xml = generate(coll, Form::Hierarchical, &p).unwrap();
            must_pass(&format!("{coll:?} hierarchical {p:?}"), &xml);
        }
    }
    let p = Params::new(5)
        .channels(2)
        .bidirectional(true)
        .factor(2)
        .pipeline(true);
    must_pass("bidirectional ring", &ring::all_reduce(&p));
}

#[test]
fn big_all_reduce_is_about_1_4_mb_with_24_threadblocks_per_gpu() {
    let start = Instant::now();
    let xml = big_all_reduce_16();
    let took = start.elapsed();
    eprintln!("big_all_reduce_16: {} bytes in {took:?}", xml.len());
    assert!(
        (1_300_000..1_500_000).contains(&xml.len()),
        "{} bytes",
        xml.len()
    );
    let algo = simulate::parse(&xml).unwrap();
    assert_eq!(algo.ngpus, 16);
    assert!(algo.gpus.iter().all(|g| g.tbs.len() == 24));
    let start = Instant::now();
    let report = check_with(
        &xml,
        &Options {
            seeds: vec![3],
            fifo_capacity: Some(2),
        },
    )
    .unwrap();
    eprintln!("checked {} steps in {:?}", report.steps, start.elapsed());
    assert_eq!(report.max_tbs_per_gpu, 24);
}

#[test]
fn broken_files_get_their_verdicts() {
    let files = broken_files();
    let rejected: Vec<&str> = files
        .iter()
        .filter_map(|f| match f.verdict {
            Verdict::Rejected(k) => Some(k),
            _ => None,
        })
        .collect();
    assert_eq!(
        rejected,
        [
            "malformed",
            "unknown step type",
            "owned by two threadblocks",
            "do not balance",
            "hasdep",
            "cycle",
            "outside",
            "ngpus"
        ]
    );
    for f in &files {
        let err = check(&f.xml).expect_err(&f.name);
        let keyword = f.verdict.keyword();
        assert_eq!(err.kind.keyword(), keyword, "{}: {err}", f.name);
        assert!(err.message.contains(keyword), "{}: {err}", f.name);
        match f.verdict {
            Verdict::Wrong(_) => {
                // Well-formed: every rule holds, and it does not deadlock.
                let algo = simulate::parse(&f.xml).unwrap();
                assert_eq!(algo.gpus.len(), f.ranks);
                let e = check_with(
                    &f.xml,
                    &Options {
                        seeds: vec![],
                        fifo_capacity: Some(2),
                    },
                )
                .unwrap_err();
                assert!(e.kind >= ErrorKind::Race, "{}: {e}", f.name);
            }
            Verdict::Rejected(_) => assert!(err.kind < ErrorKind::Race, "{}", f.name),
            Verdict::Pass => panic!("{} passes", f.name),
        }
        assert!(f.xml.len() < 20_000, "{}", f.name);
    }
}

/// The interpreter catches what it should on other mutations than the broken files'.
#[test]
fn the_interpreter_catches_mutations() {
    // Two sends of a ring swapped: the blocks arrive in the wrong places.
    let mut prog = ring::all_gather_program(&Params::new(4).factor(2).pipeline(true));
    prog.gpus[1].tbs[0].steps.swap(1, 2);
    let e = check(&prog.to_xml()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongResult, "{e}");

    // The inter-node ring of a hierarchical AllReduce not waiting for the intra-node
    // reduce-scatter: it reads the output before the rrc writes it.
    let mut prog = hierarchical::all_reduce_program(&Params::new(8));
    prog.gpus[5].tbs[1].steps[0].dep = None;
    let e = check(&prog.to_xml()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Race, "{e}");

    // A receive that depends on nothing but comes before its threadblock's send on both
    // sides: a deadlock through messages, which the importer calls a cycle.
    let mut prog = all_pairs::all_gather_program(&Params::new(2));
    for g in 0..2 {
        let steps = &mut prog.gpus[g].tbs[0].steps;
        let n = steps.len();
        steps.swap(n - 2, n - 1);
    }
    let e = check(&prog.to_xml()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Cycle, "{e}");

    // Moving a local copy to the end of its threadblock changes nothing: the
    // interpreter does not reject what is merely reordered.
    let mut prog = all_pairs::all_to_all_program(&Params::new(2).channels(1));
    let tb = &mut prog.gpus[0].tbs[0];
    let cpy = tb.steps.remove(0);
    tb.steps.push(cpy);
    must_pass("reordered cpy", &prog.to_xml());

    // A reduce that misses a contribution.
    let mut prog = ring::reduce_program(&Params::new(4));
    let root_tb = &mut prog.gpus[0].tbs[0];
    assert_eq!(root_tb.steps[0].ty, Ty::Rrc);
    root_tb.steps[0].ty = Ty::R;
    let e = check(&prog.to_xml()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongResult, "{e}");

    // A dependency on a step that says hasdep="1" but nobody depends on: also hasdep.
    let mut prog = ring::all_reduce_program(&Params::new(4));
    prog.gpus[2].tbs[0].steps[3].hasdep = Some(true);
    let e = check(&prog.to_xml()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Hasdep, "{e}");
}

/// A FIFO of one message: a rank that sends twice before receiving, to a rank that also
/// sends twice before receiving, deadlocks; with two messages it does not.
#[test]
fn fifo_capacity_is_checked() {
    let mut prog = all_pairs::all_to_all_program(&Params::new(2).channels(1).factor(2));
    for g in 0..2 {
        let tb = &mut prog.gpus[g].tbs[0];
        // cpy, s, r -> cpy, s (first chunk), s (second chunk), r, r
        let send = tb.steps[1].clone();
        let recv = tb.steps[2].clone();
        let half = |mut s: xml::Step, k: usize| {
            s.cnt = 1;
            s.src.off += k;
            if let Some(d) = s.dst.as_mut() {
                d.off += k;
            }
            s
        };
        tb.steps = vec![
            tb.steps[0].clone(),
            half(send.clone(), 0),
            half(send, 1),
            half(recv.clone(), 0),
            half(recv, 1),
        ];
    }
    let xml = prog.to_xml();
    check(&xml).unwrap();
    let one = Options {
        seeds: vec![],
        fifo_capacity: Some(1),
    };
    assert_eq!(
        check_with(&xml, &one).unwrap_err().kind,
        ErrorKind::Deadlock
    );
    let two = Options {
        seeds: vec![],
        fifo_capacity: Some(2),
    };
    check_with(&xml, &two).unwrap();
}

#[test]
fn index_lists_every_file() {
    let mut files = correct_files();
    files.extend(broken_files());
    let index = index_tsv(&files);
    let lines: Vec<&str> = index.lines().collect();
    assert_eq!(lines[0], INDEX_HEADER);
    assert_eq!(lines.len(), files.len() + 1);
    for (line, f) in lines[1..].iter().zip(&files) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 10, "{line}");
        assert_eq!(cols[0], f.name);
        assert_eq!(cols[2], f.ranks.to_string());
        assert_eq!(cols[4], f.verdict.keyword());
        assert_eq!(cols[9], f.xml.len().to_string());
    }
    let names: BTreeSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), files.len(), "names are unique");
    assert!(index.contains("all_reduce-ring-8.xml\tallreduce\t8\tr,rcs,rrcs,rrs,s\tpass"));
}

/// `tests/msccl/` holds exactly what the generators write (regenerate with `cargo run -p
/// oxccl-tests --bin msccl_files -- --checked-in tests/msccl`), every file under 20 KB.
#[test]
fn checked_in_files_are_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("msccl");
    let files = checked_in_files();
    let regenerate =
        "regenerate with: cargo run -p oxccl-tests --bin msccl_files -- --checked-in tests/msccl";
    for f in &files {
        let on_disk = std::fs::read_to_string(dir.join(&f.name))
            .unwrap_or_else(|e| panic!("{}: {e}; {regenerate}", f.name));
        assert!(on_disk == f.xml, "{} is stale; {regenerate}", f.name);
        assert!(on_disk.len() < 20_000, "{}", f.name);
    }
    let index = std::fs::read_to_string(dir.join("index.tsv")).unwrap();
    assert!(
        index == index_tsv(&files),
        "index.tsv is stale; {regenerate}"
    );
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
    expected.sort();
    assert_eq!(on_disk, expected, "{regenerate}");
}
