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

/// A meminfo field, in bytes.
fn meminfo(field: &str) -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with(field))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A size that does not fit is never skipped silently: without `--skip-oom` it is an
/// error naming the size and the way out; with it, the row says "skipped", the table
/// counts it and the exit status is 3. The size is the machine's own: one rank whose
/// send and receive buffers take 90% of its memory, which passes the sweep's check
/// against the physical memory but not the row's against 80% of what is available, so
/// nothing is allocated.
#[test]
fn a_size_that_does_not_fit_is_an_error_or_skipped_on_request() {
    let (Some(total), Some(_)) = (meminfo("MemTotal:"), meminfo("MemAvailable:")) else {
        println!("skipped: no /proc/meminfo here");
        return;
    };
    let size = (total / 20 * 9 / 4 * 4).to_string();
    let perf = |extra: &[&str]| {
        let mut args = vec![
            "perf",
            "all-reduce",
            "--ranks",
            "1",
            "-b",
            &size,
            "-e",
            &size,
            "-n",
            "1",
            "-w",
            "0",
        ];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_oxccl"))
            .args(&args)
            .output()
            .expect("runs")
    };
    let refused = perf(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    for part in [size.as_str(), "MiB available", "--skip-oom"] {
        assert!(stderr.contains(part), "{part}: {stderr}");
    }
    let skipped = perf(&["--skip-oom"]);
    let stdout = String::from_utf8_lossy(&skipped.stdout);
    assert_eq!(skipped.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains(&format!("# skipped {size} B: its buffers need")),
        "{stdout}"
    );
    assert!(stdout.contains("1 sizes skipped (--skip-oom)"), "{stdout}");
    let json = perf(&["--skip-oom", "--json"]);
    let text = String::from_utf8_lossy(&json.stdout);
    assert_eq!(json.status.code(), Some(3), "{text}");
    assert!(text.contains("\"skipped_rows\": 1"), "{text}");
}
