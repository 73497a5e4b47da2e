//! `oxccl perf --graph`: every collective measured through graph mode (capture, compile
//! once, replay) with every value checked, in-process and with the ranks in processes;
//! and the flags it refuses.

mod common;

use common::{output_text, rows};
use std::process::Command;

fn oxccl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    cmd.env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("OXCCL_COMM_ID");
    cmd
}

/// Run `args` and check that every row's `#wrong` cells are 0; returns the rows' count.
fn clean_rows(args: &[&str]) -> usize {
    let out = oxccl().args(args).output().expect("runs");
    let text = output_text(&out);
    assert!(out.status.success(), "{args:?}:\n{text}");
    let rows = rows(&text);
    for row in &rows {
        // Columns: size count type redop root, then time algbw busbw #wrong per form.
        assert_eq!(row[8], "0", "{args:?}: {row:?}");
        if row.len() > 13 {
            assert_eq!(row[12], "0", "{args:?}: {row:?}");
        }
    }
    rows.len()
}

const COLLECTIVES: [&str; 12] = [
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
    "all-to-all",
    "all-gather-v",
    "reduce-scatter-v",
    "all-to-all-v",
    "send-recv",
];

#[test]
fn every_collective_replays_correctly_through_perf_graph() {
    for collective in COLLECTIVES {
        let sweep = ["-b", "4", "-e", "256K", "-f", "64", "-n", "3", "-w", "1"];
        let args = [&["perf", collective, "--ranks", "3", "--graph"][..], &sweep].concat();
        assert_eq!(clean_rows(&args), 3, "{collective}");
        let steps = [&args[..], &["--graph-steps", "3", "-r", "2"]].concat();
        assert_eq!(clean_rows(&steps), 3, "{collective} with 3 steps");
    }
    assert_eq!(
        clean_rows(&["perf", "barrier", "--ranks", "4", "--graph"]),
        1
    );
}

#[test]
fn graphs_replay_across_processes() {
    graphs_replay_across_processes_with(&[]);
}

/// Zero-copy across processes: the graphs' agreement and every step on shared buffers.
#[test]
fn graphs_replay_across_processes_on_shared_buffers() {
    graphs_replay_across_processes_with(&["--shared-buffers"]);
}

fn graphs_replay_across_processes_with(extra: &[&str]) {
    for collective in ["all-reduce", "all-gather", "send-recv", "all-to-all-v"] {
        let mut args = vec![
            "perf",
            collective,
            "--procs",
            "4",
            "--graph",
            "--graph-steps",
            "2",
            "-b",
            "1K",
            "-e",
            "1M",
            "-f",
            "32",
            "-n",
            "3",
            "-w",
            "1",
        ];
        args.extend_from_slice(extra);
        assert_eq!(clean_rows(&args), 3, "{collective} {extra:?}");
    }
}

#[test]
fn graph_flags_out_of_range_are_refused() {
    for (args, says) in [
        (
            &["perf", "all-reduce", "--graph", "--graph-steps", "0"][..],
            "--graph-steps 0 is out of range",
        ),
        (
            &["perf", "all-reduce", "--graph", "--graph-steps", "1001"][..],
            "use 1 to 1000",
        ),
        (&["perf", "all-reduce", "--graph-steps", "2"][..], "--graph"),
        (
            &["perf", "all-reduce", "--graph", "--device", "sim"][..],
            "--graph measures graph mode on the host device",
        ),
    ] {
        let out = oxccl().args(args).output().expect("runs");
        let text = output_text(&out);
        assert!(!out.status.success(), "{args:?}:\n{text}");
        assert!(text.contains(says), "{args:?}:\n{text}");
    }
}
