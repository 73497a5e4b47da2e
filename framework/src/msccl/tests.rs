//! The reader, the format's rules and the wiring, on small files written here.

use super::import;
use super::model::StepKind;
use crate::op::OpKind;

/// A 4-rank ring AllReduce in microsoft/msccl's dialect (one chunk per rank).
fn ring(n: usize) -> String {
    let mut x = format!(
        "<algo name=\"ring\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"{n}\" \
         ngpus=\"{n}\" coll=\"allreduce\" inplace=\"1\" outofplace=\"1\" minBytes=\"0\" \
         maxBytes=\"0\">\n"
    );
    for r in 0..n {
        x += &format!("<gpu id=\"{r}\" i_chunks=\"{n}\" o_chunks=\"{n}\" s_chunks=\"0\">\n");
        x += &format!(
            "<tb id=\"0\" send=\"{}\" recv=\"{}\" chan=\"0\">\n",
            (r + 1) % n,
            (r + n - 1) % n
        );
        let mut steps = vec![("s", r, 'i')];
        steps.extend((1..n - 1).map(|j| ("rrs", (r + n - j) % n, 'i')));
        steps.push(("rrcs", (r + 1) % n, 'i'));
        steps.extend((n..2 * n - 2).map(|j| ("rcs", (r + 2 * n - j) % n, 'o')));
        steps.push(("r", (r + 2) % n, 'o'));
        for (s, (t, c, b)) in steps.into_iter().enumerate() {
            x += &format!(
                "<step s=\"{s}\" type=\"{t}\" srcbuf=\"{b}\" srcoff=\"{c}\" dstbuf=\"o\" \
                 dstoff=\"{c}\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n"
            );
        }
        x += "</tb>\n</gpu>\n";
    }
    x + "</algo>\n"
}

fn error_of(text: &str) -> String {
    match import("f.xml", text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_ring_reads_and_wires_one_connection_per_neighbour() {
    let checked = import("ring.xml", &ring(4)).unwrap();
    assert_eq!(
        checked.depth, 2,
        "a ring's receive-and-send steps need two slots"
    );
    let algo = checked.algo;
    assert_eq!(algo.coll, OpKind::AllReduce);
    assert!(algo.inplace && algo.outofplace);
    assert_eq!(algo.max_bytes, None);
    assert_eq!(algo.gpus[0].tbs[0].steps[1].kind, StepKind::RecvReduceSend);
    let w = checked.wiring;
    assert_eq!(w.connections.len(), 4);
    for c in &w.connections {
        assert_eq!(c.to, (c.from + 1) % 4);
        assert_eq!(c.messages.len(), 6, "2n - 2 messages per neighbour");
        // The k-th send meets the k-th receive: step k sends, step k + 1 receives.
        for (k, m) in c.messages.iter().enumerate() {
            assert_eq!((m.send_step, m.recv_step), (k, k + 1));
        }
    }
}

#[test]
fn both_dialects_are_read() {
    let rccl = ring(4)
        .replace("coll=\"allreduce\"", "coll=\"reducescatter\"")
        .replace(" outofplace=\"1\" minBytes=\"0\" maxBytes=\"0\"", "")
        .replace("inplace=\"1\"", "inplace=\"0\"");
    let algo = super::read::read("r.xml", &rccl).unwrap();
    assert_eq!(algo.coll, OpKind::ReduceScatter);
    assert!(
        !algo.inplace && algo.outofplace,
        "RCCL's one flag: out of place"
    );
    let ms = ring(4)
        .replace("coll=\"allreduce\"", "coll=\"reduce_scatter\"")
        .replace("maxBytes=\"0\"", "maxBytes=\"65536\"")
        .replace("minBytes=\"0\"", "minBytes=\"1024\"");
    let algo = super::read::read("m.xml", &ms).unwrap();
    assert_eq!(algo.coll, OpKind::ReduceScatter);
    assert_eq!((algo.min_bytes, algo.max_bytes), (1024, Some(65536)));
}

#[test]
fn every_rule_is_an_error_naming_file_line_gpu_tb_and_step() {
    let good = ring(4);
    let cases: Vec<(String, &str)> = vec![
        (good.replace("</algo>", ""), "malformed XML"),
        (
            good.replacen("type=\"rrs\"", "type=\"xyz\"", 1),
            "unknown step type `xyz`",
        ),
        (
            good.replacen(
                "chan=\"0\">",
                "chan=\"0\">\n</tb><tb id=\"1\" send=\"1\" recv=\"-1\" chan=\"0\">",
                1,
            ),
            "owned by two threadblocks",
        ),
        (
            good.replacen("type=\"r\" ", "type=\"cpy\" ", 1),
            "do not balance",
        ),
        (
            good.replacen("depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"1\"", 1),
            "does not say hasdep",
        ),
        (
            good.replacen("srcoff=\"0\"", "srcoff=\"4\"", 1),
            "lie outside the buffer",
        ),
        (
            good.replacen("ngpus=\"4\"", "ngpus=\"8\"", 1),
            "ngpus=\"8\" but the file has 4",
        ),
        (
            good.replacen("i_chunks=\"4\"", "i_chunks=\"5\"", 1),
            "lie outside the buffer",
        ),
        (
            good.replacen("send=\"1\"", "send=\"0\"", 1),
            "is not another gpu",
        ),
    ];
    for (text, want) in cases {
        let e = error_of(&text);
        assert!(e.contains(want), "want `{want}` in: {e}");
        assert!(e.starts_with("f.xml:"), "names the file and line: {e}");
    }
    // The step is named where the rule is a step's.
    let e = error_of(&good.replacen("type=\"rrs\"", "type=\"xyz\"", 1));
    assert!(e.contains("gpu 0, tb 0, step 1"), "{e}");
}

#[test]
fn a_dependency_cycle_is_named_step_by_step() {
    // Two threadblocks of gpu 0 each wait for the other's first step.
    let text = "<algo name=\"c\" nchannels=\"1\" nchunksperloop=\"2\" ngpus=\"2\" coll=\"allreduce\" inplace=\"0\">\n\
        <gpu id=\"0\" i_chunks=\"2\" o_chunks=\"2\" s_chunks=\"0\">\n\
        <tb id=\"0\" send=\"-1\" recv=\"-1\" chan=\"0\">\n\
        <step s=\"0\" type=\"cpy\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"1\" deps=\"0\" hasdep=\"1\"/>\n\
        </tb>\n\
        <tb id=\"1\" send=\"-1\" recv=\"-1\" chan=\"0\">\n\
        <step s=\"0\" type=\"cpy\" srcbuf=\"i\" srcoff=\"1\" dstbuf=\"o\" dstoff=\"1\" cnt=\"1\" depid=\"0\" deps=\"0\" hasdep=\"1\"/>\n\
        </tb>\n</gpu>\n\
        <gpu id=\"1\" i_chunks=\"2\" o_chunks=\"2\" s_chunks=\"0\"/>\n</algo>";
    let e = error_of(text);
    assert!(e.contains("dependency cycle"), "{e}");
    assert!(
        e.contains("gpu 0 tb 0 step 0") && e.contains("gpu 0 tb 1 step 0"),
        "{e}"
    );
}

#[test]
fn a_cycle_through_messages_is_found_too() {
    // Each rank receives before it sends: both wait for the other.
    let good = ring(2);
    let swapped = good
        .replace("s=\"0\" type=\"s\"", "s=\"0\" type=\"TMP\"")
        .replace("s=\"1\" type=\"rrcs\"", "s=\"1\" type=\"s\"")
        .replace("type=\"TMP\"", "type=\"rrcs\"");
    let e = error_of(&swapped);
    assert!(e.contains("dependency cycle"), "{e}");
}

#[test]
fn names_are_made_spellable_in_an_override() {
    assert_eq!(super::executor_name("ring; all=x"), "ring--all-x");
    assert_eq!(super::executor_name("  "), "msccl");
    assert_eq!(
        super::executor_name("allreduce_ring.v2-8"),
        "allreduce_ring.v2-8"
    );
}

mod fuzz {
    //! Whatever numbers a file holds, reading, checking and translating it ends in a
    //! result or a typed error: never a panic, never an unbounded allocation.
    use super::super::executor::FileExecutor;
    use super::super::import;
    use super::ring;
    use crate::executor::{Executor, Mode, PlanCtx};
    use crate::op::{OpKind, OpParam};
    use crate::planner::plan;
    use crate::topology::Topology;
    use oxccl_platform::{DataType, NotifyLayout, ReduceOp};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// Attributes whose values the fuzzer replaces, one occurrence at a time.
    const ATTRS: [&str; 14] = [
        "nchunksperloop",
        "ngpus",
        "nchannels",
        "i_chunks",
        "o_chunks",
        "s_chunks",
        "send",
        "recv",
        "chan",
        "srcoff",
        "dstoff",
        "cnt",
        "depid",
        "deps",
    ];
    const VALUES: [&str; 8] = [
        "0",
        "1",
        "3",
        "-1",
        "7",
        "65536",
        "18446744073709551615",
        "99999999999999999999",
    ];

    fn mutate(text: &str, edits: &[(usize, usize, usize)]) -> String {
        let mut text = text.to_string();
        for &(a, occurrence, v) in edits {
            let key = format!(" {}=\"", ATTRS[a % ATTRS.len()]);
            let Some((at, _)) = text.match_indices(&key).nth(occurrence % 32) else {
                continue;
            };
            let start = at + key.len();
            let end = start + text[start..].find('"').unwrap_or(0);
            text.replace_range(start..end, VALUES[v % VALUES.len()]);
        }
        text
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn mutated_files_are_refused_or_planned_without_panicking(
            edits in prop::collection::vec((0usize..14, 0usize..32, 0usize..8), 1..4),
            count in prop::sample::select(vec![0usize, 4, 12, 4096, 1 << 20]),
            staged in any::<bool>(),
        ) {
            let text = mutate(&ring(4), &edits);
            let Ok(checked) = import("fuzz.xml", &text) else { return Ok(()); };
            let imported = Arc::new(super::super::executor::Imported {
                name: "fuzz",
                algo: checked.algo,
                wiring: checked.wiring,
                depth: checked.depth,
            });
            let exec = FileExecutor(imported.clone());
            let ranks = imported.algo.ngpus;
            let topo = Topology::single_server(ranks);
            let op = OpParam::new(OpKind::AllReduce, count, DataType::F32, ReduceOp::Sum);
            let layout = NotifyLayout { ranks, link_channels: 8 };
            for rank in 0..ranks {
                let ctx = PlanCtx {
                    rank,
                    ranks,
                    op: &op,
                    topology: &topo,
                    mode: if staged { Mode::Staged } else { Mode::Direct },
                    ccl_bytes: 1 << 16,
                    link_channels: 8,
                    in_place: false,
                };
                if exec.resources(&ctx).is_ok() {
                    let _ = plan("fuzz", &exec, &ctx, layout);
                }
            }
        }
    }
}

#[test]
fn an_in_place_only_file_sees_one_buffer() {
    use super::executor::FileExecutor;
    use crate::executor::{Mode, PlanCtx};
    use crate::op::OpParam;
    use crate::planner::plan;
    use crate::topology::Topology;
    use oxccl_platform::{Buf, DataType, NotifyLayout, ReduceOp, Task};
    use std::sync::Arc;
    // msccl-tools' in-place form: the ring reads its own chunks from the output.
    let text = ring(4)
        .replace("srcbuf=\"i\"", "srcbuf=\"o\"")
        .replace("outofplace=\"1\"", "outofplace=\"0\"");
    let checked = import("o.xml", &text).unwrap();
    let exec = FileExecutor(Arc::new(super::executor::Imported {
        name: "o",
        algo: checked.algo,
        wiring: checked.wiring,
        depth: checked.depth,
    }));
    let topo = Topology::single_server(4);
    let op = OpParam::new(OpKind::AllReduce, 16, DataType::F32, ReduceOp::Sum);
    let ctx = |in_place| PlanCtx {
        rank: 1,
        ranks: 4,
        op: &op,
        topology: &topo,
        mode: Mode::Staged,
        ccl_bytes: 1 << 16,
        link_channels: 2,
        in_place,
    };
    let layout = NotifyLayout {
        ranks: 4,
        link_channels: 2,
    };
    // Out of place it is refused; in place, staged, the input is copied into the one
    // buffer (CclOut) before the ring reads it from there.
    let refused = crate::executor::Executor::resources(&exec, &ctx(false)).unwrap_err();
    assert!(refused.to_string().contains("in place only"), "{refused}");
    let planned = plan("o", &exec, &ctx(true), layout).unwrap();
    let into_out = planned.program.streams[0].tasks.iter().any(|t| {
        matches!(t, Task::Copy { src, dsts } if src.buf == Buf::CclIn && dsts[0].buf == Buf::CclOut)
    });
    assert!(into_out, "{:?}", planned.program.streams[0].tasks);
}
