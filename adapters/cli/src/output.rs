//! Writing reports to stdout without panicking when the reader goes away.
//!
//! `println!` panics when stdout is a closed pipe (`oxccl algs | head -1`): Rust ignores
//! SIGPIPE, so the write fails with `BrokenPipe`. Every report line goes through
//! [`write()`] instead (with the `outln!` and `out!` macros): a
//! reader that stopped reading ends the command quietly with status 0, as `head` expects;
//! any other write error ends it with status 2 and the error on stderr.

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in the processes of a multi-process run that are not rank 0: one table per job, as
/// nccl-tests prints under mpirun.
static SILENT: AtomicBool = AtomicBool::new(false);

/// Write no report lines from now on (errors still go to stderr).
pub fn silence() {
    SILENT.store(true, Ordering::Relaxed);
}

/// Write `text` to stdout, or end the process as the module doc says.
pub fn write(text: std::fmt::Arguments<'_>) {
    if SILENT.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(text) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("oxccl: error: cannot write the report to stdout: {e}");
        std::process::exit(2);
    }
}

/// `println!` through [`write()`].
macro_rules! outln {
    () => {
        $crate::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write()`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*))
    };
}
