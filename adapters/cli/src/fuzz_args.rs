//! Fuzzing the command line: arbitrary argument vectors for `perf`, `check` and `tune`,
//! built from the real flag names with boundary, huge, negative, zero and random values,
//! go through [`crate::plan`] (clap's parse and every check after it, nothing run). Each
//! must give a plan or an error message, never a panic. `PROPTEST_CASES` sets the number
//! of cases (256 by default); `scripts/fuzz.sh` runs more and prints the count.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering};

const SUBCOMMANDS: &[&str] = &["perf", "check", "tune"];

const COLLECTIVES: &[&str] = &[
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
    "barrier",
    "allsum",
    "",
];

/// Every flag of the three commands; the value strategy is chosen by [`value`].
const FLAGS: &[&str] = &[
    "-b",
    "-e",
    "-f",
    "-n",
    "-w",
    "-c",
    "-d",
    "-o",
    "-r",
    "-t",
    "-R",
    "--ranks",
    "--topo",
    "--broken",
    "--count",
    "--algo",
    "--all",
    "--json",
    "--in-place",
    "--staged",
    "--explain",
    "--algo-file",
];

/// Numbers at and around every bound the commands check, and a few nonsense ones.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "2",
            "3",
            "7",
            "8",
            "9",
            "1023",
            "1024",
            "1025",
            "100000",
            "1000000",
            "1000001",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "-0",
            "1e9",
            "",
            " ",
            "x",
        ])
        .prop_map(String::from),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ]
}

fn size() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "1K",
            "32M",
            "1G",
            "1024G",
            "1025G",
            "2000000G",
            "99999999999G",
            "18446744073709551615",
            "1T",
            "K",
            "-1K",
            "",
        ])
        .prop_map(String::from),
        (
            any::<u32>(),
            prop::sample::select(vec!["", "K", "M", "G", "X"])
        )
            .prop_map(|(n, unit)| format!("{n}{unit}")),
    ]
}

fn topo() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "mesh8",
            "mesh8-cut",
            "ring8",
            "2x8",
            "tcp8",
            "1x1",
            "1x1024",
            "1x1025",
            "0x8",
            "8x0",
            "99999999999x99999999999",
            "1x18446744073709551615",
            "32x32",
            "33x32",
            "/no/such/topo.toml",
            "",
        ])
        .prop_map(String::from),
        (0u64..2000, 0u64..2000).prop_map(|(m, n)| format!("{m}x{n}")),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "float", "half", "all", "int8", "quad", "sum", "prod", "max", "ring", "mesh", "0-1",
            "1-0", "0-0", "0-99999", "7-8",
        ])
        .prop_map(String::from),
        "[ -~]{0,12}",
    ]
}

/// A value for `flag` (`None` for the switches).
fn value(flag: &'static str) -> BoxedStrategy<Option<String>> {
    match flag {
        "--all" | "--json" | "--in-place" | "--staged" | "--explain" => Just(None).boxed(),
        "-b" | "-e" => size().prop_map(Some).boxed(),
        "--topo" => topo().prop_map(Some).boxed(),
        "--algo-file" => prop_oneof![
            prop::sample::select(vec!["/no/such/algo.xml", ".", "", "/", "/dev/null"])
                .prop_map(String::from),
            text(),
        ]
        .prop_map(Some)
        .boxed(),
        "-d" | "-o" | "--algo" | "--broken" => text().prop_map(Some).boxed(),
        _ => prop_oneof![4 => number(), 1 => text()]
            .prop_map(Some)
            .boxed(),
    }
}

fn flag_and_value() -> impl Strategy<Value = Vec<String>> {
    prop::sample::select(FLAGS).prop_flat_map(|flag| {
        value(flag).prop_map(move |v| std::iter::once(flag.to_string()).chain(v).collect())
    })
}

/// `oxccl <perf|check|tune> <collective> <flags...>`; the ranks are kept small by
/// default so that a plan that passes stays cheap to build.
fn command_line() -> impl Strategy<Value = Vec<String>> {
    (
        prop::sample::select(SUBCOMMANDS),
        prop::sample::select(COLLECTIVES),
        prop::collection::vec(flag_and_value(), 0..8),
    )
        .prop_map(|(sub, collective, flags)| {
            let mut argv = vec!["oxccl".to_string(), sub.to_string()];
            if !collective.is_empty() {
                argv.push(collective.to_string());
            }
            argv.extend(flags.into_iter().flatten());
            argv
        })
}

#[test]
fn fuzz_cli_args_plan_or_refuse_never_panic() {
    let mut runner = TestRunner::new(runner_config());
    let (planned, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let outcome = runner.run(&command_line(), |argv| {
        match crate::plan(&argv) {
            Ok(_) => planned.fetch_add(1, Ordering::Relaxed),
            Err(message) => {
                prop_assert!(!message.trim().is_empty(), "{argv:?}: an empty error");
                refused.fetch_add(1, Ordering::Relaxed)
            }
        };
        Ok(())
    });
    let (planned, refused) = (planned.into_inner(), refused.into_inner());
    eprintln!(
        "fuzz cli_args: {} cases ({planned} planned, {refused} refused)",
        planned + refused
    );
    outcome.unwrap();
}

/// The command lines of the issue's probe, each refused with the flag it names.
#[test]
fn probed_command_lines_are_refused_naming_their_flag() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["perf", "all-reduce", "--ranks", "8", "-r", "8"],
            "-r/--root",
        ),
        (
            &["check", "broadcast", "--ranks", "8", "-r", "8"],
            "-r/--root",
        ),
        (
            &["check", "reduce", "--topo", "2x8", "-r", "16"],
            "-r/--root",
        ),
        (
            &["tune", "gather", "-r", "8", "-b", "1K", "-e", "1K"],
            "-r/--root",
        ),
        (
            &["perf", "all-reduce", "--topo", "99999999999x99999999999"],
            "at most 4096",
        ),
        (
            &["check", "all-reduce", "--topo", "1x100000"],
            "at most 4096",
        ),
        (
            &["perf", "all-reduce", "--ranks", "18446744073709551615"],
            "--ranks",
        ),
        (&["perf", "all-reduce", "--ranks", "100000"], "--ranks"),
        (&["check", "all-reduce", "--ranks", "100000"], "--ranks"),
        (&["perf", "all-reduce", "--ranks", "0"], "--ranks"),
        (&["check", "all-reduce", "--ranks", "0"], "--ranks"),
        (&["tune", "all-reduce", "--ranks", "0"], "--ranks"),
        (
            &["check", "all-reduce", "--count", "18446744073709551615"],
            "--count",
        ),
        (
            &["check", "all-gather", "--count", "1099511627776"],
            "--count",
        ),
        (&["check", "all-reduce", "-e", "2000000G"], "-e/--maxbytes"),
        (
            &["perf", "all-reduce", "-b", "1025G", "-e", "1025G"],
            "-b/--minbytes",
        ),
        (
            &["perf", "all-reduce", "-e", "1024G", "-b", "1024G"],
            "MemTotal",
        ),
        (&["perf", "all-reduce", "-n", "0", "-w", "0"], "-n/--iters"),
        (&["tune", "all-reduce", "-n", "0"], "-n/--iters"),
        (&["tune", "all-reduce", "-R", "0"], "-R/--rounds"),
        (
            &["perf", "all-reduce", "-w", "18446744073709551615"],
            "-w/--warmup_iters",
        ),
        (&["perf", "all-reduce", "-t", "0"], "-t/--nthreads"),
        (&["perf", "all-reduce", "-t", "100000"], "-t/--nthreads"),
        (
            &["tune", "all-reduce", "--ranks", "4", "-t", "5"],
            "-t/--nthreads",
        ),
        (&["perf", "all-reduce", "-c", "2"], "--check"),
        (&["perf", "all-reduce", "-d", "quad"], "-d/--datatype"),
        (&["check", "all-reduce", "-o", "avg"], "-o/--op"),
    ];
    for (args, needle) in cases {
        let argv: Vec<String> = std::iter::once("oxccl")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        let err = crate::plan(&argv).expect_err(&format!("{args:?} was accepted"));
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
    }
    let bounds = [
        "oxccl", "perf", "gather", "--ranks", "1024", "-r", "1023", "-t", "1024",
    ];
    let argv: Vec<String> = bounds
        .iter()
        .copied()
        .chain(["-e", "1K", "-b", "1K"])
        .map(String::from)
        .collect();
    if let Err(err) = crate::plan(&argv) {
        panic!("the bounds themselves are valid: {err}");
    }
}

/// Proptest's defaults (`PROPTEST_CASES` honoured), without a failure file: a failing case
/// is printed in full, shrunk, in the test's output.
fn runner_config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}
