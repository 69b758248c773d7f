//! The changes writers make through a read-write mount: creating and writing staged files
//! (`write`), renames and links (`rename`), removals (`remove`), which close commits what
//! (`close`), what is refused before it is staged (`refusals`), commits (`commit`), what the
//! kernel must forget after them (`invalidations`), appends to
//! ZIP sources (`appender`) and the recovery of what a killed daemon left (`recovery`).

pub(super) mod appender;
pub(super) mod close;
pub(super) mod commit;
#[cfg(test)]
pub(super) mod commit_tests;
pub(super) mod invalidations;
pub(super) mod recovery;
pub(super) mod refusals;
pub(super) mod remove;
pub(super) mod rename;
pub(super) mod write;
