//! `OXCCL_LOG`: a `tracing` subscriber on stderr, installed once if the variable is set and
//! the application has not installed its own.

use std::io::IsTerminal;
use std::sync::Once;

/// Install the stderr subscriber for `filter` (a `tracing` env-filter directive).
pub(crate) fn init(filter: Option<&str>) {
    static ONCE: Once = Once::new();
    let Some(filter) = filter else { return };
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|e| {
            eprintln!("oxccl: OXCCL_LOG={filter:?} is not a valid filter ({e}); using `info`");
            tracing_subscriber::EnvFilter::new("info")
        });
        // An application that already installed a subscriber keeps it.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init();
    });
}
