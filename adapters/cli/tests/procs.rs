//! `oxccl perf` with its ranks in processes: `--procs N`, and under `mpirun`. One table
//! per job, every value checked.

use std::process::Command;

/// The data rows of a table (lines that start with a number).
fn rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .collect()
}

/// The `#wrong` columns (out of place, in place) of a row.
fn wrong(row: &str) -> (String, String) {
    let cols: Vec<&str> = row.split_whitespace().collect();
    (cols[8].to_string(), cols[12].to_string())
}

const SWEEP: [&str; 10] = ["-b", "1K", "-e", "4M", "-f", "64", "-n", "3", "-w", "1"];

fn assert_one_clean_table(ok: bool, stdout: &str, stderr: &str, ranks: usize) {
    assert!(ok, "{stdout}\n{stderr}");
    let headers = stdout
        .lines()
        .filter(|l| l.starts_with("# oxccl perf"))
        .count();
    assert_eq!(headers, 1, "one table for the job:\n{stdout}");
    assert!(stdout.contains(&format!("{ranks} ranks")), "{stdout}");
    let rows = rows(stdout);
    assert_eq!(rows.len(), 3, "1K, 64K, 4M:\n{stdout}");
    for row in rows {
        assert_eq!(wrong(row), ("0".into(), "0".into()), "{row}");
    }
}

/// `oxccl perf COLLECTIVE --procs 4` with `extra` flags over [`SWEEP`]: one clean table.
fn assert_procs_table(collective: &str, extra: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["perf", collective, "--procs", "4"])
        .args(extra)
        .args(SWEEP)
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("OXCCL_COMM_ID")
        .output()
        .expect("runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_one_clean_table(out.status.success(), &stdout, &stderr, 4);
}

#[test]
fn perf_runs_its_ranks_as_processes_with_procs() {
    assert_procs_table("all-reduce", &[]);
}

/// `--shared-buffers`: the calls run zero-copy across the processes, every value checked.
#[test]
fn perf_runs_zero_copy_across_processes_on_shared_buffers() {
    for collective in ["all-reduce", "reduce-scatter", "broadcast"] {
        assert_procs_table(collective, &["--shared-buffers"]);
    }
}

/// `--hosts 2`: the 4 processes as two hosts of this machine, TCP between them. On shared
/// buffers the hierarchical put executors run zero-copy inside each host, every value
/// checked.
#[test]
fn perf_runs_a_job_of_two_hosts_with_hosts() {
    assert_procs_table("all-reduce", &["--hosts", "2"]);
    for collective in ["all-reduce", "all-gather", "reduce-scatter", "broadcast"] {
        let zero_copy = [
            "--hosts",
            "2",
            "--shared-buffers",
            "--algo",
            "hier-put-ring",
        ];
        assert_procs_table(collective, &zero_copy);
    }
}

/// More hosts than processes is refused before anything starts, naming the flag.
#[test]
fn perf_refuses_more_hosts_than_processes() {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["perf", "all-reduce", "--procs", "2", "--hosts", "3"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--hosts") && stderr.contains("1 to 2 hosts"),
        "{stderr}"
    );
}

#[test]
fn perf_under_mpirun_prints_one_table() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("skipped: no `mpirun` here (scripts/install-deps.sh installs OpenMPI)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("oxccl-perf-mpirun-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("rendezvous dir");
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
        .args(["-x", "OXCCL_RENDEZVOUS_DIR"])
        .arg(env!("CARGO_BIN_EXE_oxccl"))
        .args(["perf", "all-reduce"])
        .args(SWEEP)
        .env("OXCCL_RENDEZVOUS_DIR", &dir)
        .env_remove("OXCCL_COMM_ID")
        .output()
        .expect("runs mpirun");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_one_clean_table(out.status.success(), &stdout, &stderr, 4);
    let _ = std::fs::remove_dir(&dir);
}

#[test]
fn procs_out_of_range_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["perf", "all-reduce", "--procs", "0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--procs"));
}
