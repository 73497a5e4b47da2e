//! `oxccl tune`, `OXCCL_TUNE_FILE` and `oxccl perf --topo/--broken`, end to end.

mod common;

use common::{output_text, rows};
use oxccl::framework::tune::TuneTable;
use oxccl::OpKind;
use std::path::PathBuf;
use std::process::Command;

fn oxccl(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    cmd.args(args).env_remove("OXCCL_TUNE_FILE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("runs");
    let text = output_text(&out);
    (out.status.success(), text)
}

/// `oxccl` with the words of `flags`, then `more`.
fn oxccl_words(flags: &str, more: &[&str]) -> (bool, String) {
    let args: Vec<&str> = flags
        .split_whitespace()
        .chain(more.iter().copied())
        .collect();
    oxccl(&args, &[])
}

/// A path in the temporary directory unique to this test process and `name`.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("oxccl-cli-{}-{name}", std::process::id()))
}

#[test]
fn tune_writes_a_table_that_parses_and_skips_what_needs_a_broken_link() {
    let path = temp_path("tune.txt");
    let out = path.to_str().unwrap();
    let (ok, text) = oxccl(
        &[
            "tune",
            "all-reduce",
            "--ranks",
            "4",
            "--broken",
            "0-1",
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
            "2",
            "-o",
            out,
        ],
        &[],
    );
    let table = TuneTable::load(&path);
    std::fs::remove_file(&path).ok();
    assert!(ok, "{text}");
    let table = table.unwrap_or_else(|e| panic!("{e}\n{text}"));
    for e in &table.entries {
        assert_eq!(
            (e.op, e.ranks, e.topology.as_str()),
            (OpKind::AllReduce, 4, "[4] broken 0-1")
        );
        assert!([1024, 4096].contains(&e.bytes), "{e:?}");
    }
    let at = |bytes: usize| -> Vec<&str> {
        let mut names: Vec<&str> = table
            .entries
            .iter()
            .filter(|e| e.bytes == bytes)
            .map(|e| e.executor.as_str())
            .collect();
        names.sort();
        names
    };
    // The ring family routes around the broken link; the mesh needs it and is skipped.
    assert!(
        at(1024).contains(&"ring") && at(1024).contains(&"double-ring"),
        "{text}"
    );
    assert_eq!(at(1024), at(4096), "{text}");
    assert!(!at(1024).contains(&"mesh"), "{text}");
    assert!(text.contains("# skipped mesh"), "{text}");
    assert!(
        text.contains("# select_alg's host figures: ")
            && text.contains(" workers; a thread copies "),
        "{text}"
    );
    // Each size's rows are fastest first, and the printed table agrees with the file.
    let printed = rows(&text);
    assert_eq!(printed.len(), table.entries.len(), "{text}");
    assert_eq!(printed[0].get(4), Some(&"fastest"), "{text}");
    // The pick check: select_alg's own choice (no table) is marked once per size and
    // timed against the fastest.
    let marked = printed
        .iter()
        .filter(|r| r.last() == Some(&"select_alg"))
        .count();
    assert_eq!(marked, 2, "{text}");
    assert!(
        text.contains("# select_alg without a table: ")
            && text.contains("of 2 sizes within 10% of the fastest"),
        "{text}"
    );
}

/// The `(executor, time)` pairs of `table` at `bytes`.
fn times_at(table: &TuneTable, bytes: usize) -> Vec<(&str, f64)> {
    let mut times: Vec<(&str, f64)> = table
        .entries
        .iter()
        .filter(|e| e.bytes == bytes)
        .map(|e| (e.executor.as_str(), e.time_us))
        .collect();
    times.sort_by(|a, b| a.0.cmp(b.0));
    times
}

#[test]
fn executors_with_the_same_programs_are_measured_once_and_share_the_time() {
    let path = temp_path("twins.txt");
    let out = path.to_str().unwrap();
    let tune = |broken: &[&str]| {
        let mut args = vec![
            "tune", "reduce", "--ranks", "4", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "-R",
            "1", "-o", out,
        ];
        args.extend(broken);
        let (ok, text) = oxccl(&args, &[]);
        let table = TuneTable::load(&path);
        std::fs::remove_file(&path).ok();
        assert!(ok, "{text}");
        (table.unwrap_or_else(|e| panic!("{e}\n{text}")), text)
    };
    // Healthy, the relaying mesh plans the mesh's programs: one measurement, two rows.
    let (table, text) = tune(&[]);
    let times = times_at(&table, 4096);
    let time = |name: &str| times.iter().find(|t| t.0 == name).map(|t| t.1);
    assert_eq!(time("relay-mesh"), time("mesh"), "{text}");
    assert!(time("mesh").is_some() && time("ring").is_some(), "{text}");
    let twin_rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("measured once"))
        .collect();
    assert_eq!(twin_rows.len(), 1, "{text}");
    assert!(
        twin_rows[0].contains("relay-mesh") && twin_rows[0].contains("the programs of mesh"),
        "{text}"
    );
    // With the root's link to rank 1 broken the programs differ: the mesh cannot run and
    // the relaying mesh is measured on its own.
    let (table, text) = tune(&["--broken", "0-1"]);
    let times = times_at(&table, 4096);
    assert!(times.iter().any(|t| t.0 == "relay-mesh"), "{text}");
    assert!(!times.iter().any(|t| t.0 == "mesh"), "{text}");
    assert!(!text.contains("measured once"), "{text}");
}

#[test]
fn a_bad_tune_file_stops_perf_naming_the_line() {
    let path = temp_path("bad-tune.txt");
    std::fs::write(
        &path,
        "oxccl-tune 1\nall_reduce 2 float 1024 ring 3.5 [2]\nall_reduce 2 float 4096 ring soon [2]\n",
    )
    .unwrap();
    let (ok, text) = oxccl(
        &["perf", "all-reduce", "--ranks", "2", "-b", "1K", "-e", "1K"],
        &[("OXCCL_TUNE_FILE", path.to_str().unwrap())],
    );
    std::fs::remove_file(&path).ok();
    assert!(!ok, "{text}");
    for needle in ["OXCCL_TUNE_FILE", path.to_str().unwrap(), "line 3", "soon"] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
}

#[test]
fn perf_runs_on_a_topology_with_a_broken_link() {
    let (ok, text) = oxccl(
        &[
            "perf",
            "all-reduce",
            "--topo",
            "mesh8",
            "--broken",
            "0-1",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "1",
            "-w",
            "0",
        ],
        &[],
    );
    assert!(ok, "{text}");
    assert!(text.contains("topology [8] broken 0-1"), "{text}");
    let rows = rows(&text);
    assert_eq!(rows.len(), 1, "{text}");
    assert_eq!((rows[0][8], rows[0][12]), ("0", "0"), "{text}");
    // Forcing an executor that needs the broken link is refused, naming the link.
    let (ok, text) = oxccl(
        &[
            "perf",
            "all-reduce",
            "--topo",
            "mesh8",
            "--broken",
            "0-1",
            "-b",
            "1K",
            "-e",
            "1K",
            "--algo",
            "mesh",
        ],
        &[],
    );
    assert!(!ok, "{text}");
    assert!(text.contains("broken"), "{text}");
}

#[test]
fn ranks_must_agree_with_the_topology() {
    let (ok, text) = oxccl(
        &[
            "perf",
            "all-reduce",
            "--topo",
            "mesh8",
            "--ranks",
            "4",
            "-b",
            "1K",
            "-e",
            "1K",
        ],
        &[],
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains("disagrees with --topo mesh8, which has 8 ranks"),
        "{text}"
    );
}

#[test]
fn a_points_rounds_lie_a_sweep_of_sizes_apart() {
    let path = temp_path("rounds.txt");
    let out = path.to_str().unwrap();
    let flags = "tune broadcast --ranks 2 -b 1K -e 4K -f 2 -n 1 -w 0 -R 2 --contender-rounds 1 --decider-rounds 1 -o";
    let (ok, text) = oxccl_words(flags, &[out]);
    std::fs::remove_file(&path).ok();
    assert!(ok, "{text}");
    let progress: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# tuning broadcast at"))
        .collect();
    // Two rounds over every executor, then one over each size's contenders (how many
    // depends on the figures), then one over its pick and the pick's rival (a 2-rank
    // Broadcast has more than two executors of different programs at every size).
    let want: Vec<String> = (1..=4)
        .flat_map(|round| {
            [1024, 2048, 4096].map(|size| match round {
                3 => format!("# tuning broadcast at {size} B (round 3: "),
                4 => format!("# tuning broadcast at {size} B (round 4: 2 deciders)"),
                _ => format!("# tuning broadcast at {size} B (round {round})"),
            })
        })
        .collect();
    assert_eq!(progress.len(), want.len(), "{text}");
    for (line, want) in progress.iter().zip(&want) {
        assert!(
            line.starts_with(want.as_str()),
            "{line:?}, not {want:?}\n{text}"
        );
    }
    assert!(
        text.contains("2 rounds, 3 for the executors within 1.25x of the fastest after those and the pick, then 1 more for the pick, the reference's fastest and the fastest of the others, each time the median of its rounds with each round's load at its size taken out"),
        "{text}"
    );
}

/// `--reference`: an earlier run's fastest at each size is checked as select_alg's pick
/// is; a file that is not a tuning table is refused before anything is measured.
#[test]
fn an_earlier_runs_fastest_is_checked_beside_the_pick() {
    let first = temp_path("reference-first.txt");
    let second = temp_path("reference-second.txt");
    let flags = "tune broadcast --ranks 2 -b 1K -e 4K -f 2 -n 1 -w 0 -R 1 --contender-rounds 0 -o";
    let (ok, text) = oxccl_words(flags, &[first.to_str().unwrap()]);
    assert!(ok, "{text}");
    let again = [
        second.to_str().unwrap(),
        "--reference",
        first.to_str().unwrap(),
    ];
    let (ok, text) = oxccl_words(flags, &again);
    assert!(ok, "{text}");
    let line = format!("# the fastest of {} (an earlier run): ", first.display());
    let summary = text.lines().find(|l| l.starts_with(&line));
    let summary = summary.unwrap_or_else(|| panic!("no reference check\n{text}"));
    assert!(
        summary.contains(" of 3 sizes within 10% of the fastest"),
        "{summary}"
    );
    // Not a table: refused, naming the flag, and nothing is written.
    std::fs::write(&first, "not a table\n").unwrap();
    std::fs::remove_file(&second).ok();
    let (ok, text) = oxccl_words(flags, &again);
    std::fs::remove_file(&first).ok();
    assert!(!ok, "{text}");
    assert!(text.contains("--reference"), "{text}");
    assert!(!second.exists(), "{text}");
}
