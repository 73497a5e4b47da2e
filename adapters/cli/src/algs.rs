//! `oxccl algs`: what is registered, and by which crate.

use crate::columns::{lines, Align, Align::Left, Align::Right};
use oxccl::{registry, Error};
use std::process::ExitCode;

pub fn run() -> Result<ExitCode, Error> {
    let reg = registry()?;
    outln!("# executors");
    let mut rows = vec![cells([
        "operator",
        "name",
        "crate",
        "pref",
        "links",
        "constraints",
        "description",
    ])];
    rows.extend(reg.executors().map(|e| {
        cells([
            e.op.name(),
            e.name,
            e.crate_name,
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
