//! `oxccl algs`: what is registered, and by which crate.

use oxccl::{registry, Error};
use std::process::ExitCode;

pub fn run() -> Result<ExitCode, Error> {
    let reg = registry()?;
    outln!("# executors");
    outln!(
        "{:<16} {:<12} {:<26} {:>4}  {:<25} {:<22} description",
        "operator",
        "name",
        "crate",
        "pref",
        "links",
        "constraints"
    );
    for e in reg.executors() {
        outln!(
            "{:<16} {:<12} {:<26} {:>4}  {:<25} {:<22} {}",
            e.op.name(),
            e.name,
            e.crate_name,
            e.preference,
            e.constraints.links.name(),
            e.constraints.describe(),
            e.description
        );
    }
    outln!("\n# templates");
    outln!("{:<22} {:<26} description", "name", "crate");
    for t in reg.templates() {
        outln!("{:<22} {:<26} {}", t.name, t.crate_name, t.description);
    }
    let mut selectors: Vec<_> = oxccl::framework::select::SELECTORS.iter().collect();
    selectors.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
    outln!("\n# plugin selectors ({})", selectors.len());
    for s in selectors {
        outln!("{:<22} priority {}", s.name, s.priority);
    }
    Ok(ExitCode::SUCCESS)
}
