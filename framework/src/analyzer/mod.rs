//! The analyzer: proves an executor's programs correct without moving data.
//!
//! [`recording`] builds every rank's program through the real framework path on the `sim`
//! device.

pub mod recording;

pub use recording::{RankRecording, Recording};
