//! Ranks in separate processes find each other: real processes, real sockets on loopback,
//! the root in the test process or in rank 0 (mpirun). Each rank is the `bootstrap_rank`
//! binary, which prints the table it got.

use oxccl::framework::bootstrap::UniqueId;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const RANK_BIN: &str = env!("CARGO_BIN_EXE_bootstrap_rank");

use oxccl_tests::INHERITED_LAUNCH_VARS as INHERITED;

fn rank_command() -> Command {
    let mut cmd = Command::new(RANK_BIN);
    for var in INHERITED {
        cmd.env_remove(var);
    }
    cmd
}

/// Start `n` ranks of the job `id` through `OXCCL_RANK`/`OXCCL_SIZE`/`OXCCL_COMM_ID`, with
/// `extra(rank)` added to each one's environment, and wait for all of them.
fn run_ranks(
    n: usize,
    id: &UniqueId,
    extra: impl Fn(usize) -> Vec<(String, String)>,
) -> Vec<Output> {
    let children: Vec<_> = (0..n)
        .map(|r| {
            let mut cmd = rank_command();
            cmd.env("OXCCL_RANK", r.to_string())
                .env("OXCCL_SIZE", n.to_string())
                .env("OXCCL_COMM_ID", id.to_string())
                .envs(extra(r));
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for a rank"))
        .collect()
}

/// Each rank's `(rank, pid, table)` from its line of output.
fn tables(stdout: &str) -> Vec<(usize, u32, String)> {
    stdout
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("rank ")?;
            let (rank, rest) = rest.split_once(" pid ")?;
            let (pid, table) = rest.split_once(" table ")?;
            Some((rank.parse().ok()?, pid.parse().ok()?, table.to_string()))
        })
        .collect()
}

/// Every rank printed the same table, which lists every rank's own pid, on one host.
fn assert_one_table(mut got: Vec<(usize, u32, String)>, n: usize) {
    got.sort();
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    let pids: Vec<String> = got.iter().map(|g| g.1.to_string()).collect();
    let expected = format!(
        "hosts [{:?}] pids [{}]",
        (0..n).collect::<Vec<_>>(),
        pids.join(", ")
    );
    for (rank, _, table) in &got {
        assert_eq!(table, &expected, "rank {rank}");
    }
}

#[test]
fn four_processes_meet_through_an_id_in_the_environment() {
    let id = UniqueId::create(4, Duration::from_secs(60)).expect("root");
    let outputs = run_ranks(4, &id, |_| Vec::new());
    let mut got = Vec::new();
    for (r, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        got.extend(tables(&String::from_utf8_lossy(&out.stdout)));
    }
    assert_one_table(got, 4);
}

#[test]
fn a_process_configured_differently_is_refused_on_every_rank() {
    let id = UniqueId::create(4, Duration::from_secs(60)).expect("root");
    let outputs = run_ranks(4, &id, |r| match r {
        3 => vec![("OXCCL_BUFFSIZE".into(), "8".into())],
        _ => Vec::new(),
    });
    for (r, out) in outputs.iter().enumerate() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "rank {r}: {err}");
        assert!(
            err.contains("configured differently")
                && err.contains("planning:")
                && err.contains("on ranks 3"),
            "rank {r}: {err}"
        );
        assert!(
            !err.contains("registry:"),
            "only the planning input differs: {err}"
        );
    }
}

#[test]
fn mpirun_ranks_meet_through_the_rendezvous_file() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("skipped: no `mpirun` here (scripts/install-deps.sh installs OpenMPI)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("oxccl-mpirun-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("rendezvous dir");
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
        .args(["-x", "OXCCL_RENDEZVOUS_DIR"])
        .arg(RANK_BIN)
        .env("OXCCL_RENDEZVOUS_DIR", &dir)
        .env_remove("OXCCL_COMM_ID")
        .output()
        .expect("run mpirun");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_one_table(tables(&stdout), 4);
    assert_empty(&dir);
    std::fs::remove_dir(&dir).expect("remove the rendezvous dir");
}

fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).expect("read dir").collect();
    assert!(
        left.is_empty(),
        "left behind in {}: {left:?}",
        dir.display()
    );
}
