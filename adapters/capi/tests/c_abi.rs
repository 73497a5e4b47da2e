//! The C ABI from C: the header against the library's exports, the C tests
//! (`tests/c/*.c`: every exported function and its error paths) in four processes, and
//! the example (`examples/allreduce.c`) linked statically, in four processes (and once
//! linked as a plain archive, which init refuses, saying how to link).
//!
//! The programs are built with `cc` (or `$CC`) against `include/oxccl.h` and the
//! libraries cargo built for this test, which lie next to the test binary
//! (`target/<profile>/deps`: building a crate's tests builds its cdylib and staticlib
//! too). Without a C compiler (or `nm`, for the header check) a test says why and
//! passes. Every process runs under a deadline, so a hang fails the test.
//!
//! The ranks find each other as a NCCL program's would: rank 0 calls
//! `oxcclGetUniqueId` and writes the id to a file in a fresh directory
//! (`OXCCL_TEST_DIR`, or the example's argument), and the other ranks read it.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

const RANKS: usize = 4;
/// Longest a rank process may run.
const DEADLINE: Duration = Duration::from_secs(120);

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of this test binary, where cargo put the crate's libraries.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent().expect("its directory").to_path_buf()
}

/// The C compiler, or why there is none.
fn c_compiler() -> Result<String, String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    match Command::new(&cc).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(cc),
        Ok(out) => Err(format!("`{cc} --version` exited with {}", out.status)),
        Err(e) => Err(format!("no C compiler `{cc}` ({e}); set CC or install gcc")),
    }
}

/// The C compiler; without one, says why the test is skipped.
fn c_compiler_or_skip() -> Option<String> {
    c_compiler().map_err(|why| eprintln!("skipped: {why}")).ok()
}

/// A fresh directory for one test's files.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the test");
    dir
}

/// Compile and link `sources` into `out` with `link` arguments.
fn build(cc: &str, sources: &[PathBuf], link: &[String], out: &Path) {
    let include = crate_dir().join("include");
    let output = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(&include)
        .args(sources)
        .args(link)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run the C compiler");
    assert!(
        output.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Link arguments for the shared library, found at run time through an rpath.
fn shared_link() -> Vec<String> {
    let dir = lib_dir().display().to_string();
    vec![
        format!("-L{dir}"),
        "-loxccl_capi".into(),
        format!("-Wl,-rpath,{dir}"),
    ]
}

/// What one rank process did.
struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Run `exe` once per rank with `args(rank)` and `env(rank)`, each under [`DEADLINE`]
/// (a process still running then is killed and the test fails); output goes to files in
/// `dir`.
fn run_ranks(
    exe: &Path,
    dir: &Path,
    args: impl Fn(usize) -> Vec<String>,
    env: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<Ran> {
    let mut children = Vec::new();
    for rank in 0..RANKS {
        let (out, err) = (
            dir.join(format!("out{rank}")),
            dir.join(format!("err{rank}")),
        );
        let child = Command::new(exe)
            .args(args(rank))
            .envs(env(rank))
            .stdout(File::create(&out).expect("stdout file"))
            .stderr(File::create(&err).expect("stderr file"))
            .spawn()
            .expect("start a rank process");
        children.push((child, out, err));
    }
    let start = Instant::now();
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; RANKS];
    while statuses.iter().any(Option::is_none) {
        for (status, (child, ..)) in statuses.iter_mut().zip(&mut children) {
            if status.is_none() {
                *status = child.try_wait().expect("poll a rank process");
            }
        }
        if start.elapsed() > DEADLINE {
            for (child, ..) in &mut children {
                let _ = child.kill();
            }
            let late: Vec<usize> = (0..RANKS).filter(|&r| statuses[r].is_none()).collect();
            let logs: Vec<String> = children
                .iter()
                .map(|(_, _, err)| std::fs::read_to_string(err).unwrap_or_default())
                .collect();
            panic!("ranks {late:?} still ran after {DEADLINE:?}; stderr:\n{logs:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .into_iter()
        .zip(statuses)
        .map(|((_, out, err), status)| Ran {
            status: status.expect("finished"),
            stdout: std::fs::read_to_string(out).unwrap_or_default(),
            stderr: std::fs::read_to_string(err).unwrap_or_default(),
        })
        .collect()
}

/// Every rank exited 0 and printed `expected(rank)`.
fn assert_every_rank(ran: &[Ran], expected: impl Fn(usize) -> String) {
    for (rank, r) in ran.iter().enumerate() {
        assert!(
            r.status.success() && r.stdout.contains(&expected(rank)),
            "rank {rank} exited with {}; stdout:\n{}\nstderr:\n{}",
            r.status,
            r.stdout,
            r.stderr
        );
    }
}

#[test]
fn the_c_tests_pass_in_four_processes() {
    let Some(cc) = c_compiler_or_skip() else {
        return;
    };
    let dir = fresh_dir("c_tests");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(crate_dir().join("tests/c"))
        .expect("tests/c")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    sources.sort();
    let exe = dir.join("capi_test");
    build(&cc, &sources, &shared_link(), &exe);
    let ran = run_ranks(
        &exe,
        &dir,
        |_| Vec::new(),
        |rank| {
            vec![
                ("OXCCL_TEST_RANK", rank.to_string()),
                ("OXCCL_TEST_NRANKS", RANKS.to_string()),
                ("OXCCL_TEST_DIR", dir.display().to_string()),
            ]
        },
    );
    assert_every_rank(&ran, |rank| format!("rank {rank} ok"));
}

#[test]
fn the_example_runs_in_four_processes_linked_statically() {
    let Some(cc) = c_compiler_or_skip() else {
        return;
    };
    let dir = fresh_dir("example");
    let exe = dir.join("allreduce");
    let archive = lib_dir().join("liboxccl_capi.a").display().to_string();
    let system = ["-lpthread", "-ldl", "-lm"].map(String::from);
    // Whole: the algorithms register themselves from objects nothing references.
    let mut whole = vec!["-Wl,--whole-archive".to_string(), archive.clone()];
    whole.push("-Wl,--no-whole-archive".to_string());
    whole.extend(system.clone());
    build(
        &cc,
        &[crate_dir().join("examples/allreduce.c")],
        &whole,
        &exe,
    );
    let id_file = dir.join("id").display().to_string();
    let ran = run_ranks(
        &exe,
        &dir,
        |rank| vec![RANKS.to_string(), rank.to_string(), id_file.clone()],
        |_| Vec::new(),
    );
    assert_every_rank(&ran, |rank| {
        format!("rank {rank} of {RANKS}: allreduce of 1048576 floats = 10")
    });

    // Linked as a plain archive, the registrations are dropped: refused at init, saying
    // how to link (before joining, so rank 0 alone shows it).
    let plain = dir.join("allreduce_plain");
    let link: Vec<String> = std::iter::once(archive).chain(system).collect();
    build(
        &cc,
        &[crate_dir().join("examples/allreduce.c")],
        &link,
        &plain,
    );
    let out = Command::new(&plain)
        .args(["4", "0"])
        .arg(dir.join("id_plain"))
        .output()
        .expect("run the example");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("invalid usage") && stderr.contains("-Wl,--whole-archive"),
        "{stderr}"
    );
}

/// The functions `header` declares: every `oxccl…(` outside comments.
fn declared(header: &str) -> BTreeSet<String> {
    let mut code = String::new();
    let mut rest = header;
    while let Some(start) = rest.find("/*") {
        code.push_str(&rest[..start]);
        rest = rest[start..]
            .find("*/")
            .map_or("", |end| &rest[start + end + 2..]);
    }
    code.push_str(rest);
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("oxccl") {
        if code[..at].chars().next_back().is_some_and(ident) {
            continue;
        }
        let name: String = code[at..].chars().take_while(|&c| ident(c)).collect();
        if code[at + name.len()..].trim_start().starts_with('(') {
            names.insert(name);
        }
    }
    names
}

/// The `oxccl*` functions the shared library exports, from `nm -D --defined-only`.
fn exported(lib: &Path) -> Result<BTreeSet<String>, String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .map_err(|e| format!("no `nm` ({e}); install binutils"))?;
    if !out.status.success() {
        return Err(format!(
            "nm failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T", name] if name.starts_with("oxccl") => Some(name.to_string()),
            _ => None,
        })
        .collect())
}

#[test]
fn the_header_declares_exactly_the_exported_functions() {
    let header = std::fs::read_to_string(crate_dir().join("include/oxccl.h")).expect("header");
    let declared = declared(&header);
    let required = [
        "oxcclGetVersion",
        "oxcclGetUniqueId",
        "oxcclCommInitRank",
        "oxcclCommInitRankConfig",
        "oxcclCommInitAll",
        "oxcclCommFinalize",
        "oxcclCommDestroy",
        "oxcclCommAbort",
        "oxcclCommGetAsyncError",
        "oxcclCommCount",
        "oxcclCommUserRank",
        "oxcclMemAlloc",
        "oxcclMemFree",
        "oxcclGetErrorString",
        "oxcclGetLastError",
        "oxcclAllReduce",
        "oxcclBroadcast",
        "oxcclReduce",
        "oxcclAllGather",
        "oxcclReduceScatter",
        "oxcclAlltoAll",
        "oxcclGather",
        "oxcclScatter",
        "oxcclAllGatherV",
        "oxcclReduceScatterV",
        "oxcclAlltoAllV",
        "oxcclSend",
        "oxcclRecv",
        "oxcclGroupStart",
        "oxcclGroupEnd",
        "oxcclBarrier",
        "oxcclGraphCaptureBegin",
        "oxcclGraphCaptureEnd",
        "oxcclGraphLaunch",
        "oxcclGraphDestroy",
    ];
    let required: BTreeSet<String> = required.iter().map(|s| s.to_string()).collect();
    assert_eq!(declared, required, "the header's functions");
    for (part, value) in [
        ("MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        let line = format!("#define OXCCL_{part} {value}\n");
        assert!(header.contains(&line), "the header lacks `{}`", line.trim());
    }
    match exported(&lib_dir().join("liboxccl_capi.so")) {
        Ok(exported) => assert_eq!(exported, declared, "exported vs declared"),
        Err(why) => eprintln!("skipped the export check: {why}"),
    }
}
