//! `--device` of `oxccl perf` and `oxccl tune`: the flag parses and overrides
//! `OXCCL_DEVICE`, the host's table is nccl-tests' alone, `cuda` in a build without the
//! feature (or on a machine without a driver) is a clear refusal, and on a machine with a
//! GPU (a build with the feature) the table has the copy bound. The GPU run skips with a
//! printed reason elsewhere.

mod common;

use common::{output_text, rows};
use std::process::Command;

/// Run `oxccl args` with `env` set: (exit code, stdout and stderr).
fn oxccl(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("runs");
    let text = output_text(&out);
    (out.status.code(), text)
}

const SMALL: [&str; 12] = [
    "all-reduce",
    "--ranks",
    "2",
    "-b",
    "1K",
    "-e",
    "64K",
    "-f",
    "64",
    "-n",
    "2",
    "-w",
];

fn perf(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["perf"]
        .iter()
        .chain(&SMALL)
        .map(|s| s.to_string())
        .collect();
    args.push("1".into());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn device_host_overrides_the_environment_and_keeps_the_host_table() {
    // OXCCL_DEVICE=sim would only record programs: the flag wins.
    let (code, text) = oxccl(
        &strs(&perf(&["--device", "host"])),
        &[("OXCCL_DEVICE", "sim")],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("HostDevice"), "{text}");
    let rows = rows(&text);
    assert_eq!(rows.len(), 2, "{text}");
    for cols in rows {
        // nccl-tests' columns and the executor, nothing more.
        assert_eq!(cols.len(), 14, "{cols:?}");
        assert_eq!((cols[8], cols[12]), ("0", "0"), "{cols:?}");
    }
    assert!(!text.contains("copy"), "{text}");
    let (code, text) = oxccl(&strs(&perf(&["--device", "host", "--json"])), &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("copy_gbps"), "{text}");
}

#[test]
fn an_unknown_device_is_refused_with_the_known_kinds() {
    let (code, text) = oxccl(&strs(&perf(&["--device", "tpu"])), &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--device") && text.contains("tpu") && text.contains("host"),
        "{text}"
    );
}

/// `--device cuda` without a GPU to run on: a build without the feature says to rebuild
/// with it (perf and tune, before anything runs); a build with it, on a machine without a
/// driver, says there is no driver. Either way the status is 2.
#[test]
fn device_cuda_without_a_gpu_is_a_clear_refusal() {
    if gpu_reason().is_none() {
        eprintln!("skipped: this machine has a GPU and a build with the cuda feature");
        return;
    }
    let (code, text) = oxccl(&strs(&perf(&["--device", "cuda"])), &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    if cfg!(feature = "cuda") {
        assert!(text.contains("CUDA driver"), "{text}");
        return;
    }
    assert!(
        text.contains("--device") && text.contains("rebuild with `--features cuda`"),
        "{text}"
    );
    let tune = ["tune", "all-reduce", "--ranks", "2", "--device", "cuda"];
    let (code, text) = oxccl(&tune, &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--device") && text.contains("rebuild with `--features cuda`"),
        "{text}"
    );
}

/// `None` when this build has the cuda feature and the machine a GPU; else why not.
fn gpu_reason() -> Option<String> {
    #[cfg(feature = "cuda")]
    return match oxccl::platform::cuda::gpu_count() {
        Ok(0) => Some("the CUDA driver reports no GPU".into()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    };
    #[cfg(not(feature = "cuda"))]
    Some("this build has no cuda feature".into())
}

#[test]
fn perf_on_a_gpu_checks_device_buffers_and_shows_the_copy_bound() {
    if let Some(why) = gpu_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let gpu0 = [("OXCCL_CUDA_DEVICES", "0")];
    let (code, text) = oxccl(&strs(&perf(&["--device", "cuda"])), &gpu0);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("busbw/copy"), "{text}");
    let rows = rows(&text);
    assert_eq!(rows.len(), 2, "{text}");
    for cols in rows {
        // nccl-tests' columns, the copy bound and the ratio, then the executor.
        assert_eq!(cols.len(), 16, "{cols:?}");
        assert_eq!((cols[8], cols[12]), ("0", "0"), "{cols:?}");
        let copy: f64 = cols[13].parse().expect("copy GB/s");
        let ratio: f64 = cols[14].parse().expect("busbw/copy");
        assert!(copy > 0.0 && ratio > 0.0, "{cols:?}");
    }
    assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
    let (code, text) = oxccl(&strs(&perf(&["--device", "cuda", "--json"])), &gpu0);
    assert_eq!(code, Some(0), "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    for row in doc["rows"].as_array().unwrap() {
        assert!(row["copy_gbps"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["concurrent_copies"], 2, "{row}");
    }
}

#[test]
fn perf_graph_on_a_gpu_checks_its_rows_values_and_guards() {
    if let Some(why) = gpu_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let gpu0 = [("OXCCL_CUDA_DEVICES", "0")];
    let args = perf(&["--device", "cuda", "--graph", "--graph-steps", "4"]);
    let (code, text) = oxccl(&strs(&args), &gpu0);
    assert_eq!(code, Some(0), "{text}");
    let rows = rows(&text);
    assert_eq!(rows.len(), 2, "{text}");
    for cols in rows {
        assert_eq!((cols[8], cols[12]), ("0", "0"), "no wrong values: {cols:?}");
    }
    assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
}

/// `--procs 2 --device cuda`: two processes on GPU 0, each call staged through host
/// memory between them; the rows' values and guards checked as in one process.
#[test]
fn perf_across_processes_on_a_gpu_checks_its_rows_values() {
    if let Some(why) = gpu_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let args = [
        "perf",
        "all-reduce",
        "--procs",
        "2",
        "--device",
        "cuda",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "32",
        "-n",
        "2",
        "-w",
        "1",
    ];
    let (code, text) = oxccl(&args, &[("OXCCL_CUDA_DEVICES", "0")]);
    assert_eq!(code, Some(0), "{text}");
    let rows = rows(&text);
    assert_eq!(rows.len(), 3, "1K, 32K, 1M: {text}");
    for cols in rows {
        assert_eq!((cols[8], cols[12]), ("0", "0"), "no wrong values: {cols:?}");
    }
    assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
}
