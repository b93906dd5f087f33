//! Warnings a user must see (a batch scope whose live memory keeps growing, a bad
//! `VRAMGUARD_ALLOC_CONF`, a block freed to the wrong allocator): they go to stderr unless the
//! user routes them to `tracing` (by installing a subscriber, or with
//! [`WarningOutput::Tracing`](crate::scope::WarningOutput) on a batch scope). A warning sent only
//! to `tracing` is lost when no subscriber is installed, which is the default.

use crate::scope::WarningOutput;

/// Whether a `tracing` subscriber (global or for this thread) would receive events.
pub(crate) fn subscriber_installed() -> bool {
    tracing::dispatcher::get_default(|d| !d.is::<tracing::subscriber::NoSubscriber>())
}

/// Emits `message` as a warning through `output`: a `tracing` warning (target `vramguard`) when
/// routed there, else one line on stderr.
pub(crate) fn warn(output: WarningOutput, message: &str) {
    let to_tracing = match output {
        WarningOutput::Auto => subscriber_installed(),
        WarningOutput::Stderr => false,
        WarningOutput::Tracing => true,
    };
    if to_tracing {
        tracing::warn!(target: "vramguard", "{message}");
    } else {
        eprintln!("warning: vramguard: {message}");
    }
}

/// Emits `message` as an error: to `tracing` when a subscriber is installed, else to stderr.
pub(crate) fn error(message: &str) {
    if subscriber_installed() {
        tracing::error!(target: "vramguard", "{message}");
    } else {
        eprintln!("error: vramguard: {message}");
    }
}
