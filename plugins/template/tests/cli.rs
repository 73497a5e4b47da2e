//! This crate's binary is the oxccl toolbox with the template's executor registered:
//! every command sees it, and `--procs` starts this binary again, not `oxccl`.

use oxccl_plugin_template::NAME;
use std::process::Command;

/// Run the binary; (success, stdout, stderr).
fn toolbox(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl-plugin-template"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The data rows of a table (lines that start with a number).
fn rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .collect()
}

/// `oxccl perf`'s rows: every size ran the executor, in and out of place, nothing wrong.
fn assert_perf_rows(stdout: &str, sizes: usize) {
    let rows = rows(stdout);
    assert_eq!(rows.len(), sizes, "{stdout}");
    for row in rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.last(), Some(&NAME), "{row}");
        // #wrong, out of place and in place.
        assert_eq!((cells[8], cells[12]), ("0", "0"), "{row}");
    }
}

#[test]
fn algs_lists_the_executor_with_this_crate_and_no_other_plugin() {
    let (ok, stdout, stderr) = toolbox(&["algs"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("all_gather")
            && l.contains(NAME)
            && l.contains("oxccl-plugin-template")),
        "{stdout}"
    );
    // Only what this binary links is registered: not the example plugin of `oxccl`.
    assert!(!stdout.contains("bidir-ring"), "{stdout}");
}

#[test]
fn perf_runs_the_executor_in_threads_and_in_processes() {
    let sizes = ["-b", "1K", "-e", "64K", "-f", "8", "-n", "2", "-w", "1"];
    let threads = [
        &["perf", "all-gather", "--algo", NAME, "--ranks", "4"][..],
        &sizes,
    ]
    .concat();
    let (ok, stdout, stderr) = toolbox(&threads);
    assert!(ok, "{stdout}{stderr}");
    assert_perf_rows(&stdout, 3);
    // Every process is this binary again: `oxccl` would not know the executor.
    let procs = [
        &["perf", "all-gather", "--algo", NAME, "--procs", "2"][..],
        &sizes,
    ]
    .concat();
    let (ok, stdout, stderr) = toolbox(&procs);
    assert!(ok, "{stdout}{stderr}");
    assert_perf_rows(&stdout, 3);
}

#[test]
fn check_proves_it_on_a_whole_mesh_and_refuses_it_on_a_broken_one() {
    let sizes = ["-b", "1K", "-e", "1M", "-f", "32"];
    let whole = [
        &["check", "all-gather", "--algo", NAME, "--topo", "mesh8"][..],
        &sizes,
    ]
    .concat();
    let (ok, stdout, stderr) = toolbox(&whole);
    assert!(ok, "{stdout}{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(
        rows.iter().all(|r| r.contains(NAME) && r.contains("PASS")),
        "{stdout}"
    );
    let broken = [&whole[..], &["--broken", "0-1"]].concat();
    let (ok, _, stderr) = toolbox(&broken);
    assert!(!ok && stderr.contains("needs a full mesh"), "{stderr}");
}

#[test]
fn tune_measures_the_executor_and_records_it() {
    let table =
        std::env::temp_dir().join(format!("oxccl-template-tune-{}.txt", std::process::id()));
    let path = table.to_str().expect("a UTF-8 temp path");
    let (ok, stdout, stderr) = toolbox(&[
        "tune",
        "all-gather",
        "--ranks",
        "4",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "1",
        "-w",
        "0",
        "-R",
        "1",
        "-o",
        path,
    ]);
    let written = std::fs::read_to_string(&table);
    let _ = std::fs::remove_file(&table);
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(
        rows(&stdout).iter().filter(|r| r.contains(NAME)).count(),
        2,
        "{stdout}"
    );
    let written = written.expect("the tuning table");
    assert_eq!(
        written
            .lines()
            .filter(|l| l.starts_with("all_gather") && l.contains(NAME))
            .count(),
        2,
        "{written}"
    );
}
