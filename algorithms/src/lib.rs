//! # oxccl-algorithms
//!
//! The built-in executors and the templates they are made of, after HCCL's algorithms
//! layer. One algorithm per file, grouped by operator (`all_reduce/`, `all_gather/`, `reduce_scatter/`); reusable
//! patterns in `templates/`. Everything registers itself at link time, so linking this
//! crate is all it takes to make the built-ins selectable.

pub mod all_gather;
pub mod all_reduce;
pub mod reduce_scatter;
pub mod templates;
