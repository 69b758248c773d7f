//! Core errors to errno (the one place where that mapping is decided), and the guard that turns
//! a panic in an operation into `EIO` instead of a hung request.

use std::panic::{catch_unwind, AssertUnwindSafe};

use fuser::{Errno, ReplyEmpty};

use crate::core::FsError;

/// The errno for each core error: the one place where this mapping is decided.
pub fn errno(error: &FsError) -> Errno {
    match error {
        FsError::NotFound => Errno::ENOENT,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::Exists => Errno::EEXIST,
        FsError::NotEmpty => Errno::ENOTEMPTY,
        FsError::ReadOnly => Errno::EROFS,
        FsError::NotPermitted(_) => Errno::EPERM,
        FsError::Invalid(_) => Errno::EINVAL,
        FsError::Io(e) => Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)),
        FsError::Content(_) | FsError::Internal(_) => Errno::EIO,
    }
}

/// Runs one operation; a panic becomes [`FsError::Internal`], and errors worth knowing are logged.
pub(super) fn guarded<T>(what: &str, op: impl FnOnce() -> Result<T, FsError>) -> Result<T, Errno> {
    let result = catch_unwind(AssertUnwindSafe(op)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        Err(FsError::Internal(message))
    });
    result.map_err(|e| {
        match &e {
            FsError::Content(_) | FsError::Internal(_) | FsError::Io(_) => {
                log::error!("{what}: {e}")
            }
            FsError::NotPermitted(_) | FsError::Invalid(_) => log::warn!("{what} refused: {e}"),
            _ => log::debug!("{what}: {e}"),
        }
        errno(&e)
    })
}

/// Answers an operation that returns nothing.
pub(super) fn answer(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_operation_answers_eio_instead_of_hanging() {
        let answer: Result<(), Errno> = guarded("test", || panic!("boom"));
        assert_eq!(answer.map_err(|e| e.code()), Err(libc::EIO));
    }

    #[test]
    fn errors_map_to_their_errno() {
        for (error, code) in [
            (FsError::NotFound, libc::ENOENT),
            (FsError::NotDir, libc::ENOTDIR),
            (FsError::IsDir, libc::EISDIR),
            (FsError::ReadOnly, libc::EROFS),
            (FsError::NotPermitted("x".into()), libc::EPERM),
            (FsError::Exists, libc::EEXIST),
            (FsError::NotEmpty, libc::ENOTEMPTY),
            (FsError::Internal("x".into()), libc::EIO),
        ] {
            assert_eq!(errno(&error).code(), code);
        }
    }
}
