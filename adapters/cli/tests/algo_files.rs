//! `--algo-file`: MSCCL-IR algorithm files imported as executors by `oxccl check`, `perf`,
//! `tune` and `algs`, end to end. A correct ring AllReduce passes the analyzer and runs
//! with nothing wrong (in threads and in processes); a file that breaks a rule of the
//! format stops the command naming the file, the line and the rule; a well-formed file
//! that computes the wrong thing fails the analyzer's semantics check.

mod common;

use common::{output_text, rows};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The command's exit code and its stdout and stderr together.
fn oxccl(args: &[&str]) -> (Option<i32>, String) {
    let out = command().args(args).output().expect("runs");
    (out.status.code(), output_text(&out))
}

/// `oxccl <command> all-reduce --ranks 4 --algo-file <file> <rest>...`: what most of
/// these tests run.
fn all_reduce_4(command: &str, file: &str, rest: &[&str]) -> (Option<i32>, String) {
    let head = [command, "all-reduce", "--ranks", "4", "--algo-file", file];
    oxccl(&[&head[..], rest].concat())
}

/// The `oxccl` binary, without the variables that would change what it imports, selects
/// or how it starts its ranks.
fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    for var in [
        "OXCCL_ALGO_FILES",
        "OXCCL_ALGO",
        "OXCCL_TUNE_FILE",
        "OXCCL_TOPO_FILE",
        "OMPI_COMM_WORLD_RANK",
        "OXCCL_COMM_ID",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// A fresh folder of this test process for `name`.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oxccl-algo-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

fn write(dir: &Path, file: &str, text: &str) -> String {
    let path = dir.join(file);
    std::fs::write(&path, text).expect("writes the algorithm file");
    path.to_str().expect("a UTF-8 path").to_string()
}

/// A ring AllReduce on `n` gpus in MSCCL-IR, one threadblock per gpu, one chunk per rank
/// (MSCCLang's `allreduce_ring`): gpu `r` sends its chunk `r`, reduces and passes on the
/// next `n - 2` chunks it receives, reduces the last one into its output and sends it on,
/// then copies out and passes on the reduced chunks of the all-gather.
fn ring(name: &str, n: usize) -> String {
    let mut out = vec![format!(
        r#"<algo name="{name}" proto="Simple" nchannels="1" nchunksperloop="{n}" ngpus="{n}" coll="allreduce" inplace="1" outofplace="1" minBytes="0" maxBytes="0">"#
    )];
    let at = |r: usize, back: usize| (r + n - back % n) % n;
    for r in 0..n {
        out.push(format!(
            r#"  <gpu id="{r}" i_chunks="{n}" o_chunks="{n}" s_chunks="0">"#
        ));
        out.push(format!(
            r#"    <tb id="0" send="{}" recv="{}" chan="0">"#,
            (r + 1) % n,
            at(r, 1)
        ));
        // (type, chunk, source buffer): the destination is the output's same chunk.
        let mut steps = vec![("s", r, "i")];
        steps.extend((1..n - 1).map(|j| ("rrs", at(r, j), "i")));
        steps.push(("rrcs", (r + 1) % n, "i"));
        steps.extend((0..n - 2).map(|j| ("rcs", at(r, j), "o")));
        steps.push(("r", (r + 2) % n, "o"));
        for (s, (kind, c, src)) in steps.into_iter().enumerate() {
            out.push(format!(
                r#"      <step s="{s}" type="{kind}" srcbuf="{src}" srcoff="{c}" dstbuf="o" dstoff="{c}" cnt="1" depid="-1" deps="-1" hasdep="0"/>"#
            ));
        }
        out.push("    </tb>".into());
        out.push("  </gpu>".into());
    }
    out.push("</algo>".into());
    out.join("\n") + "\n"
}

/// The 1-based number of the first line of `text` that contains `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} is not in the file:\n{text}"))
        + 1
}

/// `text` with `from` replaced by `to` on line `line` (1-based) only.
fn on_line(text: &str, line: usize, from: &str, to: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let target = &mut lines[line - 1];
    assert!(
        target.contains(from),
        "{from:?} is not on line {line}: {target}"
    );
    *target = target.replacen(from, to, 1);
    lines.join("\n") + "\n"
}

/// The line of step `s` of gpu `g`'s (only) threadblock.
fn step_line(text: &str, g: usize, s: usize) -> usize {
    let gpu = line_of(text, &format!(r#"<gpu id="{g}""#));
    gpu + 1
        + line_of(
            &text.lines().skip(gpu + 1).collect::<Vec<_>>().join("\n"),
            &format!(r#"<step s="{s}" "#),
        )
}

#[test]
fn check_proves_a_ring_file_on_4_and_8_ranks() {
    let dir = temp_dir("check-ring");
    for n in [4usize, 8] {
        let name = format!("file-ring{n}");
        let file = write(&dir, &format!("ring{n}.xml"), &ring(&name, n));
        let ranks = n.to_string();
        let (code, text) = oxccl(&[
            "check",
            "all-reduce",
            "--algo-file",
            &file,
            "--ranks",
            &ranks,
            "--algo",
            &name,
            "-b",
            "1K",
            "-e",
            "16M",
            "-f",
            "16",
        ]);
        assert_eq!(code, Some(0), "{text}");
        let rows = rows(&text);
        assert_eq!(rows.len(), 4, "1K, 16K, 256K, 4M:\n{text}");
        for row in rows {
            assert_eq!((row[2], row[3]), (name.as_str(), "PASS"), "{row:?}\n{text}");
        }
        // In place too, and without --algo: the one executor the file brings for the
        // collective is what is checked.
        let (code, text) = oxccl(&[
            "check",
            "all-reduce",
            "--algo-file",
            &file,
            "--ranks",
            &ranks,
            "--in-place",
            "-b",
            "64K",
            "-e",
            "64K",
        ]);
        assert_eq!(code, Some(0), "{text}");
        let checked = common::rows(&text);
        assert_eq!(checked.len(), 1, "{text}");
        assert_eq!(
            (checked[0][2], checked[0][3]),
            (name.as_str(), "PASS"),
            "{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn broken_files_are_refused_naming_file_line_and_rule() {
    let dir = temp_dir("broken");
    let good = ring("ring4", 4);
    let gpu0_end = line_of(&good, "</tb>");
    let (s0, s1) = (step_line(&good, 0, 0), step_line(&good, 0, 1));
    let last_recv = step_line(&good, 0, 6);
    let drop_line = |text: &str, line: usize| {
        let kept: Vec<&str> = text
            .lines()
            .enumerate()
            .filter(|&(i, _)| i + 1 != line)
            .map(|(_, l)| l)
            .collect();
        kept.join("\n") + "\n"
    };
    let unbalanced = drop_line(&good, last_recv);
    let second_tb = {
        let mut lines: Vec<&str> = good.lines().collect();
        lines.insert(
            gpu0_end,
            r#"    <tb id="1" send="1" recv="-1" chan="0"></tb>"#,
        );
        lines.join("\n") + "\n"
    };
    // (file, its text, the line named, what the message says)
    let cases: Vec<(&str, String, Option<usize>, &str)> = vec![
        (
            "unknown-type.xml",
            on_line(&good, s1, r#"type="rrs""#, r#"type="rrx""#),
            Some(s1),
            "unknown step type `rrx`",
        ),
        (
            "unbalanced.xml",
            unbalanced.clone(),
            // The sender's threadblock.
            Some(line_of(&unbalanced, r#"<gpu id="3""#) + 1),
            "sends and receives do not balance on channel 0 from gpu 3 to gpu 0",
        ),
        (
            "two-owners.xml",
            second_tb,
            Some(gpu0_end + 1),
            "channel 0 send to gpu 1 is owned by two threadblocks (0 and 1)",
        ),
        (
            "no-hasdep.xml",
            on_line(
                &good,
                s1,
                r#"depid="-1" deps="-1""#,
                r#"depid="0" deps="0""#,
            ),
            Some(s1),
            r#"depends on step 0 of threadblock 0 (line "#,
        ),
        (
            "cycle.xml",
            on_line(
                &on_line(
                    &good,
                    s0,
                    r#"depid="-1" deps="-1""#,
                    r#"depid="0" deps="1""#,
                ),
                s1,
                r#"hasdep="0""#,
                r#"hasdep="1""#,
            ),
            None,
            "dependency cycle: ",
        ),
        (
            "outside.xml",
            on_line(&good, s0, r#"srcoff="0""#, r#"srcoff="9""#),
            Some(s0),
            r#"srcbuf="i" chunks 9..10 lie outside the buffer's 4 chunks"#,
        ),
        (
            "ngpus.xml",
            on_line(&good, 1, r#"ngpus="4""#, r#"ngpus="5""#),
            Some(1),
            r#"ngpus="5" but the file has 4 <gpu> elements"#,
        ),
        (
            "no-type.xml",
            on_line(&good, s1, r#" type="rrs""#, ""),
            Some(s1),
            "malformed: <step> has no `type` attribute",
        ),
        (
            "truncated.xml",
            drop_line(&good, good.lines().count()),
            None,
            "malformed XML",
        ),
    ];
    for (file, text, line, rule) in cases {
        let path = write(&dir, file, &text);
        let (code, out) = all_reduce_4("check", &path, &[]);
        assert_eq!(code, Some(2), "{file}: {out}");
        let named = match line {
            Some(line) => format!("oxccl: error: algorithm file {path}:{line}"),
            None => format!("oxccl: error: algorithm file {path}:"),
        };
        assert!(out.contains(&named), "{file}: {named:?} not in {out}");
        let after = &out[out.find(&named).unwrap() + named.len()..];
        assert!(
            line.is_some() || after.starts_with(|c: char| c.is_ascii_digit()),
            "{file}: no line named: {out}"
        );
        assert!(out.contains(rule), "{file}: {rule:?} not in {out}");
        assert!(!out.contains("panicked"), "{file}: {out}");
        // Every command refuses it before running anything.
        for command in ["perf", "tune"] {
            let (code, out) = all_reduce_4(command, &path, &[]);
            assert_eq!(code, Some(2), "{command} {file}: {out}");
            assert!(
                out.contains(&named) && out.contains(rule),
                "{command}: {out}"
            );
        }
    }
    let (code, out) = oxccl(&[
        "algs",
        "--algo-file",
        &dir.join("ngpus.xml").to_string_lossy(),
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("ngpus=\"5\""), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_well_formed_wrong_file_fails_the_semantics_check() {
    let dir = temp_dir("wrong");
    let good = ring("wrong-ring", 4);
    // Gpu 0 reduces input chunk 2 into the chunk 3 it passes on.
    let wrong = on_line(
        &good,
        step_line(&good, 0, 1),
        r#"srcoff="3""#,
        r#"srcoff="2""#,
    );
    let file = write(&dir, "wrong.xml", &wrong);
    let (code, text) = all_reduce_4(
        "check",
        &file,
        &["--algo", "wrong-ring", "-b", "1K", "-e", "1K"],
    );
    assert_eq!(code, Some(1), "{text}");
    let rows = rows(&text);
    assert!(rows[0][3].starts_with("FAIL"), "{text}");
    assert!(
        text.contains("[Semantics] rank 0 Output[768..1024]: wrong offset"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perf_runs_a_ring_file_with_nothing_wrong_in_threads_and_processes() {
    let dir = temp_dir("perf");
    let file = write(&dir, "ring4.xml", &ring("perf-ring", 4));
    let sweep = ["-b", "1K", "-e", "1M", "-f", "32", "-n", "3", "-w", "1"];
    let base = [
        "perf",
        "all-reduce",
        "--algo-file",
        &file,
        "--algo",
        "perf-ring",
    ];
    for how in [
        &["--ranks", "4"][..],
        &["--ranks", "4", "-t", "4"],
        &["--procs", "4"],
    ] {
        let args = [&base[..], how, &sweep].concat();
        let (code, text) = oxccl(&args);
        assert_eq!(code, Some(0), "{how:?}: {text}");
        let rows = rows(&text);
        assert_eq!(rows.len(), 3, "{how:?}: 1K, 32K, 1M:\n{text}");
        for row in rows {
            // #wrong out of place and in place, and the executor.
            assert_eq!(
                (row[8], row[12], row[13]),
                ("0", "0", "perf-ring"),
                "{how:?}: {row:?}"
            );
        }
        assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
    }
    // The environment's files reach the processes too.
    let two = dir.join("two");
    std::fs::create_dir_all(&two).expect("a folder");
    write(&two, "ring2.xml", &ring("perf-ring2", 2));
    let out = command()
        .args(["perf", "all-reduce", "--procs", "2", "--algo", "perf-ring2"])
        .args(["-b", "4K", "-e", "4K", "-n", "2", "-w", "1"])
        .env("OXCCL_ALGO_FILES", &two)
        .output()
        .expect("runs");
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let rows = rows(&text);
    assert_eq!(rows.len(), 1, "{text}");
    assert_eq!(
        (rows[0][8], rows[0][12], rows[0][13]),
        ("0", "0", "perf-ring2"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explain_gives_the_size_rule_for_a_count_the_chunks_do_not_divide() {
    let dir = temp_dir("explain");
    let file = write(&dir, "ring4.xml", &ring("rule-ring", 4));
    let (code, text) = all_reduce_4("check", &file, &["--count", "2", "--explain"]);
    assert_eq!(code, Some(0), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("rule-ring"))
        .unwrap_or_else(|| panic!("no candidate line for the file:\n{text}"));
    assert!(
        line.contains("rejected (infeasible)")
            && line.contains("it runs counts that are multiples of 4, and this call's is not"),
        "{line}"
    );
    // Forced, the same count is refused with the same reason.
    let (code, text) = all_reduce_4("check", &file, &["--algo", "rule-ring", "--count", "2"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("counts must be multiples of 4"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn algs_lists_imported_executors_with_their_files() {
    let dir = temp_dir("algs");
    let four = write(&dir, "ring4.xml", &ring("algs-ring4", 4));
    let eight = write(&dir, "ring8.xml", &ring("algs-ring8", 8));
    let row = |text: &str, name: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("{name} is not listed:\n{text}"));
        line.split_whitespace().map(String::from).collect()
    };
    // A folder brings its *.xml files.
    let (code, text) = oxccl(&["algs", "--algo-file", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    for (name, path, ranks) in [
        ("algs-ring4", &four, "4..4"),
        ("algs-ring8", &eight, "8..8"),
    ] {
        let cells = row(&text, name);
        assert_eq!(
            (&cells[0][..], &cells[2], &cells[4][..]),
            ("all_reduce", path, "put"),
            "{cells:?}"
        );
        let rest = cells[5..].join(" ");
        assert!(
            rest.starts_with(&format!("ranks {ranks}")) && rest.contains("MSCCL-IR all_reduce"),
            "{cells:?}"
        );
    }
    // Built-ins keep their crate in the same column.
    assert_eq!(row(&text, "bidir-ring")[2], "oxccl-plugin-bidir-ring");
    // The same file named twice (flag and environment) is one executor.
    let out = command()
        .args(["algs", "--algo-file", &four])
        .env("OXCCL_ALGO_FILES", &four)
        .output()
        .expect("runs");
    let listed = output_text(&out);
    assert!(out.status.success(), "{listed}");
    assert_eq!(listed.matches("algs-ring4").count(), 1, "{listed}");
    // A name a built-in has is made unique, and the file's own name shown.
    let taken = write(&dir, "ring.xml", &ring("ring", 4));
    let (code, text) = oxccl(&["algs", "--algo-file", &taken]);
    assert_eq!(code, Some(0), "{text}");
    let cells = row(&text, "ring-2");
    assert_eq!(cells[2], taken, "{cells:?}");
    assert!(text.contains(r#"(named "ring" there)"#), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_files_and_empty_folders_are_refused() {
    let empty = temp_dir("empty");
    let (code, text) = oxccl(&["algs", "--algo-file", empty.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--algo-file") && text.contains("holds no *.xml file"),
        "{text}"
    );
    let missing = empty.join("no-such.xml");
    let (code, text) = oxccl(&[
        "check",
        "all-reduce",
        "--algo-file",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains(&format!("algorithm file {}", missing.display()))
            && text.contains("cannot read it"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn tune_measures_an_imported_executor() {
    let dir = temp_dir("tune");
    let file = write(&dir, "ring4.xml", &ring("tune-ring", 4));
    let table = dir.join("tune.txt");
    let path = table.to_str().unwrap();
    let sweep = [
        "-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "-R", "1", "-o", path,
    ];
    let (code, text) = all_reduce_4("tune", &file, &sweep);
    assert_eq!(code, Some(0), "{text}");
    assert!(rows(&text).iter().any(|r| r[2] == "tune-ring"), "{text}");
    let written = std::fs::read_to_string(&table).expect("the table");
    assert!(
        written
            .lines()
            .any(|l| l.starts_with("all_reduce") && l.contains(" tune-ring ")),
        "{written}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perf_leaves_out_the_in_place_form_a_file_does_not_run() {
    let dir = temp_dir("out-of-place");
    let text = ring("oop-ring", 4).replacen(r#"inplace="1""#, r#"inplace="0""#, 1);
    let file = write(&dir, "ring4.xml", &text);
    let (code, text) = all_reduce_4(
        "perf",
        &file,
        &[
            "--algo", "oop-ring", "-b", "1K", "-e", "64K", "-f", "64", "-n", "2", "-w", "1",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(
            r#"# in place not run: oop-ring refuses it: the file does not run in place (inplace="0")"#
        ),
        "{text}"
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    for row in rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[8], "0", "#wrong out of place: {row}");
        assert!(row.contains("refused by the executor"), "{row}");
        assert_eq!(cells.last(), Some(&"oop-ring"), "{row}");
    }
    // Without --algo the in-place calls simply select another executor.
    let (code, text) = all_reduce_4(
        "perf",
        &file,
        &["-b", "64K", "-e", "64K", "-n", "2", "-w", "1"],
    );
    assert_eq!(code, Some(0), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One line of `tests/msccl/index.tsv`: a checked-in file and what it must do.
struct Indexed {
    file: PathBuf,
    collective: String,
    ranks: String,
    verdict: String,
    stage: String,
}

/// The checked-in MSCCL-IR files of `tests/msccl/` with their index, when the folder
/// exists.
fn checked_in() -> Option<Vec<Indexed>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/msccl");
    let index = std::fs::read_to_string(dir.join("index.tsv")).ok()?;
    let mut lines = index.lines();
    let header: Vec<&str> = lines.next()?.split('\t').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("index.tsv has no `{name}` column: {header:?}"))
    };
    let (file, op, ranks, verdict, stage) = (
        col("file"),
        col("operator"),
        col("ranks"),
        col("verdict"),
        col("stage"),
    );
    Some(
        lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let cells: Vec<&str> = l.split('\t').collect();
                Indexed {
                    file: dir.join(cells[file]),
                    collective: cells[op].to_string(),
                    ranks: cells[ranks].to_string(),
                    verdict: cells[verdict].to_string(),
                    stage: cells[stage].to_string(),
                }
            })
            .collect(),
    )
}

/// The `name` attribute of a file's `<algo>`.
fn algo_name(text: &str) -> String {
    let at = text.find(" name=\"").expect("a name attribute") + 7;
    text[at..at + text[at..].find('"').expect("its end")].to_string()
}

#[test]
fn checked_in_files_do_what_their_index_says() {
    let Some(files) = checked_in() else {
        println!("skipped: no tests/msccl/index.tsv here");
        return;
    };
    println!("{} indexed files in tests/msccl", files.len());
    for f in files {
        let path = f.file.to_str().expect("a UTF-8 path");
        let name = algo_name(&std::fs::read_to_string(&f.file).expect("the indexed file"));
        let base = [
            "check",
            &f.collective,
            "--ranks",
            &f.ranks,
            "--algo-file",
            path,
            "-b",
            "1K",
            "-e",
            "1M",
            "-f",
            "1024",
        ];
        let forced = [&base[..], &["--algo", &name]].concat();
        match (f.stage.as_str(), f.verdict.as_str()) {
            ("import", rule) => {
                let (code, out) = oxccl(&base);
                assert_eq!(code, Some(2), "{path}: {out}");
                let named = format!("oxccl: error: algorithm file {path}:");
                let at = out
                    .find(&named)
                    .unwrap_or_else(|| panic!("{path}: not named in {out}"));
                assert!(
                    out[at + named.len()..].starts_with(|c: char| c.is_ascii_digit()),
                    "{path}: no line: {out}"
                );
                assert!(out.contains(rule), "{path}: {rule:?} not in {out}");
            }
            ("analyze", verdict) => {
                let (code, out) = oxccl(&forced);
                assert_eq!(code, Some(1), "{path}: {out}");
                let finding = match verdict {
                    "wrong result" => "[Semantics]",
                    "race" => "[MemoryConflict]",
                    "double-counted" => "duplicated contributions",
                    _ => "FAIL at",
                };
                assert!(out.contains(finding), "{path}: {finding:?} not in {out}");
            }
            (_, "pass") => {
                let (code, out) = oxccl(&forced);
                assert_eq!(code, Some(0), "{path}: {out}");
                assert!(rows(&out).iter().all(|r| r[3] == "PASS"), "{path}: {out}");
                let perf = [
                    "perf",
                    &f.collective,
                    "--ranks",
                    &f.ranks,
                    "--algo-file",
                    path,
                    "--algo",
                    &name,
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
                let (code, out) = oxccl(&perf);
                assert_eq!(code, Some(0), "{path}: {out}");
                let rows = rows(&out);
                assert_eq!(rows.len(), 3, "{path}: {out}");
                assert!(rows.iter().all(|r| r[8] == "0"), "{path}: {out}");
            }
            other => panic!("{path}: an index line this test does not know: {other:?}"),
        }
    }
}
