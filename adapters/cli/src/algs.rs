//! `oxccl algs`: what is registered, and where it came from: the crate that registered
//! it, or the MSCCL-IR file it was imported from (`--algo-file`, `OXCCL_ALGO_FILES`).

use crate::columns::{lines, Align, Align::Left, Align::Right};
use clap::Args;
use oxccl::{registry, Error, ExecutorEntry};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct AlgsArgs {
    #[command(flatten)]
    pub files: crate::algo_files::AlgoFiles,
}

/// Where an executor came from: its crate, or for an imported one its file (and the name
/// the file gives it, when that was taken and the executor was renamed).
fn source(e: &ExecutorEntry) -> String {
    match e.file {
        None => e.crate_name.to_string(),
        Some(file) if file.name.eq_ignore_ascii_case(e.name) => file.path.clone(),
        Some(file) => format!("{} (named \"{}\" there)", file.path, file.name),
    }
}

pub fn run() -> Result<ExitCode, Error> {
    let reg = registry()?;
    outln!("# executors");
    let mut rows = vec![cells([
        "operator",
        "name",
        "source",
        "pref",
        "links",
        "constraints",
        "description",
    ])];
    rows.extend(reg.executors().map(|e| {
        cells([
            e.op.name(),
            e.name,
            &source(e),
            &e.preference.to_string(),
            e.constraints.links.name(),
            &e.constraints.describe(),
            e.description,
        ])
    }));
    print_table(&[Left, Left, Left, Right, Left, Left, Left], &rows);
    outln!("\n# templates");
    let mut rows = vec![cells(["name", "crate", "description"])];
    rows.extend(
        reg.templates()
            .map(|t| cells([t.name, t.crate_name, t.description])),
    );
    print_table(&[Left, Left, Left], &rows);
    let mut selectors: Vec<_> = oxccl::framework::select::SELECTORS.iter().collect();
    selectors.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
    outln!("\n# plugin selectors ({})", selectors.len());
    if !selectors.is_empty() {
        let mut rows = vec![cells(["name", "priority"])];
        rows.extend(
            selectors
                .iter()
                .map(|s| cells([s.name, &s.priority.to_string()])),
        );
        print_table(&[Left, Right], &rows);
    }
    Ok(ExitCode::SUCCESS)
}

fn cells<const N: usize>(texts: [&str; N]) -> Vec<String> {
    texts.map(str::to_string).into()
}

fn print_table(align: &[Align], rows: &[Vec<String>]) {
    for line in lines(align, rows) {
        outln!("{line}");
    }
}
