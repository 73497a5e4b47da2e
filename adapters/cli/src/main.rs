//! The `oxccl` binary: the toolbox of [`oxccl_cli`] with the bundled example plugin linked,
//! so that `--algo bidir-ring` works out of the box. A vendor's binary is the same two
//! lines with its own plugin crate named instead.

use oxccl_plugin_bidir_ring as _;

fn main() -> std::process::ExitCode {
    oxccl_cli::main()
}
