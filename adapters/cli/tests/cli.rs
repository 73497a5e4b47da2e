//! The `oxccl` binary end to end: exit status and the lines a user reads.

mod common;

use common::output_text;
use std::process::{Command, Stdio};

fn oxccl(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(args)
        .output()
        .expect("runs");
    let text = output_text(&out);
    (out.status.success(), text)
}

/// The data rows of a table (lines that start with a number).
fn rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .collect()
}

#[test]
fn perf_prints_the_table_with_nothing_wrong() {
    for algo in ["mesh", "ring", "bidir-ring"] {
        let (ok, text) = oxccl(&[
            "perf",
            "all-reduce",
            "--ranks",
            "4",
            "-b",
            "1K",
            "-e",
            "256K",
            "-f",
            "16",
            "-n",
            "3",
            "-w",
            "1",
            "--algo",
            algo,
        ]);
        assert!(ok, "{text}");
        let rows = rows(&text);
        assert_eq!(rows.len(), 3, "{text}");
        for row in rows {
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!((cols[8], cols[12], cols[13]), ("0", "0", algo), "{row}");
        }
        assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
    }
}

#[test]
fn perf_json_and_every_dtype() {
    let (ok, text) = oxccl(&[
        "perf",
        "all-reduce",
        "--ranks",
        "3",
        "-b",
        "4K",
        "-e",
        "4K",
        "-n",
        "1",
        "-w",
        "0",
        "-d",
        "all",
        "-o",
        "all",
        "--json",
    ]);
    assert!(ok, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    assert_eq!(doc["rows"].as_array().unwrap().len(), 12 * 4);
    assert_eq!(doc["wrong"], 0);
}

#[test]
fn perf_rejects_an_unknown_algorithm() {
    let (ok, text) = oxccl(&[
        "perf",
        "all-reduce",
        "--algo",
        "warp-speed",
        "-b",
        "1K",
        "-e",
        "1K",
    ]);
    assert!(!ok);
    assert!(
        text.contains("warp-speed") && text.contains("mesh-push"),
        "{text}"
    );
}

#[test]
fn algs_lists_builtins_and_the_plugin_with_their_crates() {
    let (ok, text) = oxccl(&["algs"]);
    assert!(ok, "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("bidir-ring") && l.contains("oxccl-plugin-bidir-ring")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("ring_reduce_scatter") && l.contains("oxccl-algorithms")),
        "{text}"
    );
}

#[test]
fn check_the_contest_topology() {
    let (ok, text) = oxccl(&[
        "check",
        "all-reduce",
        "--topo",
        "mesh8",
        "--broken",
        "0-1",
        "-b",
        "1K",
        "-e",
        "1G",
        "-f",
        "1024",
    ]);
    assert!(ok, "{text}");
    let rows = rows(&text);
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows.iter().all(|r| r.contains("PASS")), "{text}");
}

#[test]
fn check_explain_lists_every_candidate_under_each_row() {
    let (ok, text) = oxccl(&[
        "check",
        "all-reduce",
        "--topo",
        "mesh8",
        "--broken",
        "0-1",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "1024",
        "--explain",
    ]);
    assert!(ok, "{text}");
    assert_eq!(rows(&text).len(), 2, "{text}");
    let decided: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("selected by the cost model"))
        .collect();
    assert_eq!(decided.len(), 2, "{text}");
    // Each row's executor is the candidate marked chosen under it, with its figures.
    for row in rows(&text) {
        let executor = row.split_whitespace().nth(2).unwrap();
        let chosen = format!("{executor} ");
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&chosen) && l.contains("chosen: ")),
            "{text}"
        );
    }
    // mesh needs the broken link: rejected, with the reason.
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("mesh ")
            && l.contains("rejected (constraint): needs a full mesh")),
        "{text}"
    );
    assert!(text.contains("slower than"), "{text}");
}

#[test]
fn check_refuses_a_disconnected_topology_naming_the_ranks() {
    let mut args = vec![
        "check",
        "all-reduce",
        "--topo",
        "mesh8",
        "-b",
        "1K",
        "-e",
        "1K",
    ];
    let pairs: Vec<String> = (1..8).map(|p| format!("0-{p}")).collect();
    for pair in &pairs {
        args.extend(["--broken", pair.as_str()]);
    }
    let (ok, text) = oxccl(&args);
    assert!(!ok, "{text}");
    assert!(
        text.contains("ranks {0} and {1,...,7} have no path of healthy links"),
        "{text}"
    );
}

#[test]
fn check_all_passes_for_the_executors_of_a_collective() {
    // Every executor's own test runs the same matrix (`assert_conforms`); here the command
    // itself, narrowed to two cheap collectives to keep the suite's time.
    let (ok, text) = oxccl(&["check", "barrier", "--all"]);
    assert!(ok, "{text}");
    let (ok, more) = oxccl(&["check", "scatter", "--all"]);
    assert!(ok, "{more}");
    let text = text + &more;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("PASS") || l.starts_with("FAIL"))
        .collect();
    // dissemination and spanning-tree; mesh, put-mesh, relay-mesh and tree.
    assert_eq!(lines.len(), 6, "{text}");
    // The put-only shapes (4+4, 8+8, 8+4 over RoCE, tcp8) are checked for the executors
    // that declare they can run there, and skipped for those that need load/store; the
    // two broken meshes are skipped for those that declare a full mesh (dissemination,
    // the scatter tree), and checked for the others, which route around the broken link.
    for line in &lines {
        let puts = line.contains("put-mesh") || line.contains("barrier");
        let full_mesh = line.contains("dissemination") || line.contains(" tree ");
        let skipped = match (puts, full_mesh) {
            (true, false) => " 0 shapes skipped",
            (true, true) => " 2 shapes skipped",
            (false, false) => " 4 shapes skipped",
            (false, true) => " 6 shapes skipped",
        };
        assert!(line.contains(skipped), "{line}");
    }
    assert!(
        lines
            .iter()
            .all(|l| l.contains("barrier") || l.contains("scatter")),
        "{text}"
    );
    assert!(lines.iter().all(|l| l.starts_with("PASS")), "{text}");
}

#[test]
fn check_sequence_proves_back_to_back_calls_and_refuses_then_alone() {
    let (ok, text) = oxccl(&[
        "check",
        "all-reduce",
        "--ranks",
        "4",
        "--count",
        "1000",
        "--algo",
        "ring",
        "--sequence",
        "--then",
        "all-gather",
        "--then-algo",
        "ring",
    ]);
    assert!(ok, "{text}");
    assert!(
        text.contains("sequences ring,ring; ring,ring,ring; ring,ring; ring,ring,ring: PASS"),
        "{text}"
    );
    let (ok, json) = oxccl(&[
        "check",
        "all-reduce",
        "--ranks",
        "3",
        "--count",
        "7",
        "--sequence",
        "--json",
    ]);
    assert!(ok && json.contains("\"sequence_failures\": 0"), "{json}");
    let (ok, text) = oxccl(&["check", "all-reduce", "--then", "all-gather"]);
    assert!(!ok && text.contains("--then needs --sequence"), "{text}");
    let (ok, text) = oxccl(&["check", "all-reduce", "--sequence", "--then-algo", "ring"]);
    assert!(!ok && text.contains("--then-algo needs --then"), "{text}");
}

#[test]
fn a_reader_that_stops_after_one_line_ends_check_quietly() {
    use std::io::{BufRead, BufReader};
    // A report of some 180 KB, far more than a pipe holds: after the reader goes away the
    // command is still writing, whatever the timing.
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["check", "all-reduce", "--ranks", "4", "-b", "1", "-e", "1G"])
        .args(["-f", "2", "--explain", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("one line");
    assert_eq!(first, "{\n");
    drop(stdout);
    let out = child.wait_with_output().expect("ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// What the command wrote to stderr, and its exit code.
fn refusal(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn check_refuses_ranks_that_disagree_with_the_topology_as_perf_does() {
    let sizes = ["-b", "1K", "-e", "1K"];
    let check = [
        &["check", "all-reduce", "--topo", "mesh8", "--ranks", "4"][..],
        &sizes,
    ]
    .concat();
    let perf = [
        &["perf", "all-reduce", "--topo", "mesh8", "--ranks", "4"][..],
        &sizes,
    ]
    .concat();
    let (code, check_err) = refusal(&check);
    assert_eq!(code, Some(2), "{check_err}");
    assert!(
        check_err.contains("--ranks=\"4\" is invalid: disagrees with --topo mesh8"),
        "{check_err}"
    );
    assert_eq!(refusal(&perf), (Some(2), check_err));
    let (ok, text) = oxccl(&[
        "check",
        "all-reduce",
        "--topo",
        "mesh8",
        "--ranks",
        "8",
        "-b",
        "1K",
        "-e",
        "1K",
    ]);
    assert!(ok && text.contains("on 8 ranks"), "{text}");
}

/// The line of `command --help` that documents `flag`.
fn help_line(command: &str, flag: &str) -> String {
    let (ok, text) = oxccl(&[command, "--help"]);
    assert!(ok, "{text}");
    text.lines()
        .find(|l| l.trim_start().starts_with(flag))
        .unwrap_or_else(|| panic!("`{command} --help` documents {flag}: {text}"))
        .to_string()
}

#[test]
fn every_command_lists_the_same_topology_presets() {
    let presets = |line: &str| {
        let start = line.find("a preset (").expect("the preset list");
        line[start..line[start..].find(')').unwrap() + start].to_string()
    };
    let check = presets(&help_line("check", "--topo"));
    assert!(
        check.contains("mesh8-cut") && check.contains("tcp8"),
        "{check}"
    );
    for command in ["perf", "tune"] {
        assert_eq!(presets(&help_line(command, "--topo")), check, "{command}");
    }
}

#[test]
fn algs_columns_stay_aligned_past_long_names_and_constraints() {
    let (ok, text) = oxccl(&["algs"]);
    assert!(ok, "{text}");
    let mut lines = text.lines().skip_while(|l| !l.starts_with("operator"));
    let header = lines.next().expect("the executors' header");
    let rows: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
    for long in [
        "relay-mesh-single",
        "hier-pipelined",
        "relay-reduce-scatter-gather",
    ] {
        assert!(rows.iter().any(|r| r.contains(long)), "{long}: {text}");
    }
    // Every left-aligned column starts where its header does (pref is right-aligned).
    let starts: Vec<usize> = ["source", "links", "constraints", "description"]
        .iter()
        .map(|h| header.find(h).expect("a column header"))
        .collect();
    for row in &rows {
        for &at in &starts {
            let (before, cell) = (row.as_bytes()[at - 1], row.as_bytes()[at]);
            assert!(
                before == b' ' && cell != b' ',
                "column at {at}:\n{header}\n{row}"
            );
        }
    }
}

#[test]
fn calibrate_measures_once_then_shows_the_kept_figures() {
    let dir = std::env::temp_dir().join(format!("oxccl-calibrate-{}", std::process::id()));
    let calibrate = |args: &[&str], cache: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
            .arg("calibrate")
            .args(args)
            .env("OXCCL_HOST_CACHE", cache)
            .output()
            .expect("runs");
        (out.status.code(), output_text(&out))
    };
    let (code, text) = calibrate(&["--workers", "2"], &dir);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("measured now") && text.contains(&*dir.to_string_lossy()),
        "{text}"
    );
    let quiet = text.contains("on a quiet machine");
    assert!(quiet || text.contains("on a busy machine"), "{text}");
    let thread: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("thread_gbps"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("a thread rate");
    assert!(thread > 0.0, "{text}");
    // The forwarding rate: measured where two CPUs can be pinned, `-` where not.
    let forward = text
        .lines()
        .find_map(|l| l.strip_prefix("forward_gbps"))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a forwarding row");
    assert!(
        forward == "-" || forward.parse::<f64>().is_ok_and(|g| g > 0.0),
        "{text}"
    );
    // The task cost: measured on a device the probe makes, beside the reference's.
    let task: Vec<f64> = text
        .lines()
        .find_map(|l| l.strip_prefix("task_us"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        task.len() == 2 && task.iter().all(|us| *us >= 0.0),
        "{text}"
    );
    let (_, again) = calibrate(&["--workers", "2"], &dir);
    if quiet || again.contains("kept from an earlier measurement") {
        assert!(
            again.contains("kept from an earlier measurement"),
            "{again}"
        );
        assert_eq!(
            rows(&again),
            rows(&text),
            "the kept figures are the measured ones"
        );
    } else {
        // Measured while the machine was busy, which it no longer is: measured again.
        assert!(
            again.contains("measured now") && again.contains("on a quiet machine"),
            "{again}"
        );
    }
    let (_, fresh) = calibrate(&["--workers", "2", "--again"], &dir);
    assert!(fresh.contains("measured now"), "{fresh}");
    let (_, none) = calibrate(&["--workers", "1"], std::path::Path::new("off"));
    assert!(none.contains("file: none"), "{none}");
    let (code, refused) = calibrate(&["--workers", "0"], &dir);
    assert_eq!(code, Some(2), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}
