//! `msccl_files [--checked-in] <dir>`: writes the MSCCL-IR test files of
//! `oxccl_tests::msccl` into `<dir>` with an `index.tsv` (file, operator, ranks, step
//! types, verdict, stage, root, nchannels, threadblocks per gpu, bytes).
//!
//! Without `--checked-in`: every correct file (each collective as a ring and all-pairs on
//! 4, 8 and 16 ranks, AllReduce and AllGather also hierarchical), the big 16-rank
//! AllReduce (about 1.4 MB), and every broken file. With it: only the small set kept
//! under `tests/msccl/` (regenerate that with
//! `cargo run -p oxccl-tests --bin msccl_files -- --checked-in tests/msccl`).

use oxccl_tests::msccl::{big_file, broken_files, checked_in_files, correct_files, index_tsv};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut checked_in = false;
    let mut dir = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--checked-in" => checked_in = true,
            "-h" | "--help" => {
                println!("usage: msccl_files [--checked-in] <dir>");
                return ExitCode::SUCCESS;
            }
            _ if dir.is_none() && !arg.starts_with('-') => dir = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("usage: msccl_files [--checked-in] <dir>");
                return ExitCode::from(2);
            }
        }
    }
    let Some(dir) = dir else {
        eprintln!("usage: msccl_files [--checked-in] <dir>");
        return ExitCode::from(2);
    };
    let files = if checked_in {
        checked_in_files()
    } else {
        let mut files = correct_files();
        files.push(big_file());
        files.extend(broken_files());
        files
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let mut bytes = 0;
    for f in &files {
        let path = dir.join(&f.name);
        if let Err(e) = std::fs::write(&path, &f.xml) {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        bytes += f.xml.len();
    }
    let index = dir.join("index.tsv");
    if let Err(e) = std::fs::write(&index, index_tsv(&files)) {
        eprintln!("{}: {e}", index.display());
        return ExitCode::FAILURE;
    }
    println!(
        "{} files ({bytes} bytes) and index.tsv in {}",
        files.len(),
        dir.display()
    );
    ExitCode::SUCCESS
}
