//! The `oxccl` binary facing what the issue's probe threw at it: a reader that goes away,
//! and flags that used to panic or run away. Each must end with a clean status and a
//! message, never a panic.

use std::process::{Command, Stdio};

/// Run `oxccl args` with stdout a pipe whose reading end is already closed: every write
/// fails with a broken pipe. Returns (exit code, stderr).
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let perf = [
        "perf",
        "all-reduce",
        "--ranks",
        "2",
        "-b",
        "1K",
        "-e",
        "4K",
        "-n",
        "1",
        "-w",
        "0",
    ];
    for args in [&["algs"][..], &perf[..]] {
        let (code, stderr) = with_closed_stdout(args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn refusals_exit_2_with_the_flag_named_and_no_panic() {
    let cases: &[(&[&str], &str)] = &[
        (&["check", "broadcast", "-r", "8"], "-r/--root"),
        (
            &["perf", "broadcast", "-r", "8", "-b", "1K", "-e", "1K"],
            "-r/--root",
        ),
        (
            &["check", "all-reduce", "--topo", "99999999999x99999999999"],
            "at most 4096",
        ),
        (&["perf", "all-reduce", "--ranks", "100000"], "--ranks"),
        (
            &["check", "all-reduce", "--count", "18446744073709551615"],
            "--count",
        ),
        (&["perf", "all-reduce", "-n", "0", "-w", "0"], "-n/--iters"),
    ];
    for (args, needle) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
            .args(*args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_bad_environment_names_its_variable() {
    for (var, value) in [
        ("OXCCL_EXEC_TIMEOUT", "1e-9"),
        ("OXCCL_LOG", "oxccl=["),
        ("OXCCL_ALGO", "all_reduce=ring;all_reduce=mesh"),
        ("OXCCL_HOST_THREADS", "100000"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
            .args(["check", "all-reduce", "-b", "1K", "-e", "1K"])
            .env(var, value)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {stderr}");
        assert!(stderr.contains(var), "{var} not in {stderr}");
    }
}

#[test]
fn an_unreadable_or_malformed_file_is_reported_with_its_causes() {
    let malformed =
        std::env::temp_dir().join(format!("oxccl-refusals-{}.toml", std::process::id()));
    std::fs::write(&malformed, "servers = [8\n").unwrap();
    let malformed = malformed.to_str().unwrap();
    // (flags, environment, a cause that must be printed, the last cause)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: [Case<'_>; 3] = [
        (
            &["check", "all-reduce", "--topo", "/no/such/topology.toml"],
            &[],
            "cannot read the topology file /no/such/topology.toml",
            "No such file",
        ),
        (
            &["check", "all-reduce", "--topo", malformed],
            &[],
            "line 1, column",
            "TOML parse error",
        ),
        (
            &["check", "all-reduce", "-b", "1K", "-e", "1K"],
            &[("OXCCL_TUNE_FILE", "/no/such/tune.txt")],
            "/no/such/tune.txt: cannot read the file",
            "No such file",
        ),
    ];
    for (args, env, cause, last) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("oxccl: error: "), "{args:?}: {stderr}");
        let causes: Vec<&str> = stderr
            .lines()
            .filter_map(|l| l.strip_prefix("  caused by: "))
            .collect();
        assert!(
            causes.iter().any(|c| c.contains(cause)),
            "{args:?}: {cause:?} is not a cause in {stderr}"
        );
        let after_last = stderr.rsplit("  caused by: ").next().unwrap_or_default();
        assert!(
            after_last.contains(last),
            "{args:?}: {last:?} not last in {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    std::fs::remove_file(malformed).unwrap();
}
