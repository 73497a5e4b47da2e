//! The oxccl toolbox (`perf`, `check`, `tune`, `algs`) with this crate's executors
//! registered: naming the plugin links it, and linking is registration.

use oxccl_plugin_template as _;

fn main() -> std::process::ExitCode {
    oxccl_cli::main()
}
