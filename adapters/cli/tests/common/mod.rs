//! Helpers that several of the `oxccl` binary's test files share (`mod common;` in each).

// Each test file is a crate of its own and uses only some of them.
#![allow(dead_code)]

use std::process::Output;

/// A finished command's stdout and stderr together.
pub fn output_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// The data rows of a table (lines that start with a number), split into cells.
pub fn rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .map(|l| l.split_whitespace().collect())
        .collect()
}
