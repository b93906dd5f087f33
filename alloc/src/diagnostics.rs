//! Warnings a user must see (a batch scope whose live memory keeps growing, a bad
//! `VRAMGUARD_ALLOC_CONF`, a block freed to the wrong allocator): they go to stderr unless the
//! user routes them to `tracing` (by installing a subscriber, or with
//! [`WarningOutput::Tracing`] on a batch scope). A warning sent only to `tracing` is lost when
//! no subscriber is installed, which is the default.
//!
//! The lowest layer of the runtime: it imports nothing of the crate. [`WarningOutput`] is
//! public as `scope::WarningOutput`.

/// Where vramguard's warnings go: a batch scope's (live memory that keeps growing, chosen per
/// scope) and the allocator's (always [`WarningOutput::Auto`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WarningOutput {
    /// To a `tracing` subscriber when one is installed (global or for the thread), else to
    /// stderr: never lost (the default).
    #[default]
    Auto,
    /// Always to stderr.
    Stderr,
    /// Always to `tracing` (target `vramguard`, level `WARN`); lost without a subscriber.
    Tracing,
}

/// Whether a `tracing` subscriber (global or for this thread) would receive events.
#[doc(hidden)]
pub fn subscriber_installed() -> bool {
    tracing::dispatcher::get_default(|d| !d.is::<tracing::subscriber::NoSubscriber>())
}

/// Emits `message` as a warning through `output`: a `tracing` warning (target `vramguard`) when
/// routed there, else one line on stderr.
#[doc(hidden)]
pub fn warn(output: WarningOutput, message: &str) {
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
#[doc(hidden)]
pub fn error(message: &str) {
    if subscriber_installed() {
        tracing::error!(target: "vramguard", "{message}");
    } else {
        eprintln!("error: vramguard: {message}");
    }
}
