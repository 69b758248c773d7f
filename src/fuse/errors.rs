//! Core errors to errno (the one place where that mapping is decided), and the guard that turns
//! a panic in an operation into `EIO` instead of a hung request.

use std::panic::{catch_unwind, AssertUnwindSafe};

use fuser::{Errno, ReplyEmpty};

use crate::core::FsError;
use crate::stores::StoreError;

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
        FsError::NoSpace(_) => Errno::ENOSPC,
        FsError::Io(e) => Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)),
        FsError::Content(StoreError::Io { source, .. }) => Errno::from_i32(
            source
                .raw_os_error()
                .filter(|e| PASSED_ON.contains(e))
                .unwrap_or(libc::EIO),
        ),
        FsError::Content(_) | FsError::Internal(_) => Errno::EIO,
    }
}

/// The answer to `opendir` that tells a kernel offering zero-message opendir never to send one
/// again (nor `releasedir`).
pub(super) fn no_opendir() -> Errno {
    Errno::ENOSYS
}

/// The answer to every `ioctl`: what a regular file answers (no file here is a device).
pub(super) fn no_ioctl() -> Errno {
    Errno::ENOTTY
}

/// The answer to every extended-attribute request: none are kept, and the kernel asks no more
/// (it asks `security.capability` before the first write of every file otherwise).
pub(super) fn no_xattrs() -> Errno {
    Errno::ENOSYS
}

/// The answer to an open of an inode whose file changed while passthrough handles on its
/// previous file are open (the kernel allows one backing file per inode).
pub(super) fn backing_busy() -> Errno {
    Errno::ETXTBSY
}

/// I/O errors of the source or the staging area that reach the caller as they are (a full
/// disk is `ENOSPC`, not `EIO`); any other I/O error on content is `EIO`.
const PASSED_ON: [i32; 9] = [
    libc::ENOSPC,
    libc::EDQUOT,
    libc::EFBIG,
    libc::EIO,
    libc::ENAMETOOLONG,
    libc::EROFS,
    libc::ENOMEM,
    libc::EMFILE,
    libc::ENFILE,
];

/// Runs one operation; a panic becomes [`FsError::Internal`], and errors worth knowing are logged.
pub(super) fn guarded<T>(what: &str, op: impl FnOnce() -> Result<T, FsError>) -> Result<T, Errno> {
    guarded_on(what, String::new, op)
}

/// [`guarded`] for an operation on a path of the mount (`subject`, asked only for a refusal):
/// a refusal is one log line naming the path, the errno and the reason (the logger puts the
/// mount point before it).
pub(super) fn guarded_on<T>(
    what: &str,
    subject: impl FnOnce() -> String,
    op: impl FnOnce() -> Result<T, FsError>,
) -> Result<T, Errno> {
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
            FsError::Content(_) if !first_time(&e.to_string()) => log::debug!("{what}: {e}"),
            FsError::Content(_) | FsError::Internal(_) | FsError::Io(_) | FsError::NoSpace(_) => {
                log::error!("{what}: {e}")
            }
            FsError::NotPermitted(_) | FsError::Invalid(_) => {
                log::warn!("{}", refusal_line(what, &subject(), &e))
            }
            _ => log::debug!("{what}: {e}"),
        }
        errno(&e)
    })
}

/// `close of pbmc.daf/vectors/cell/x.data refused (EINVAL): vectors/cell/x: why`.
fn refusal_line(what: &str, subject: &str, error: &FsError) -> String {
    let (code, why) = match error {
        FsError::Invalid(why) => ("EINVAL", why.clone()),
        FsError::NotPermitted(why) => ("EPERM", why.clone()),
        other => ("EPERM", other.to_string()),
    };
    let what = if subject.is_empty() {
        what.to_string()
    } else {
        format!("{what} of {subject}")
    };
    format!("{what} refused ({code}): {why}")
}

/// Whether a content error with this message is seen for the first time: a bad property is one
/// log line, however often it is read (the kernel retries a failed read, readers loop). Remembers
/// up to 65,536 messages (by hash), then logs every one.
fn first_time(message: &str) -> bool {
    use std::hash::{BuildHasher, Hasher};
    static SEEN: std::sync::Mutex<Option<std::collections::HashSet<u64>>> =
        std::sync::Mutex::new(None);
    let mut hasher = foldhash::fast::FixedState::with_seed(0).build_hasher();
    hasher.write(message.as_bytes());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = seen.get_or_insert_with(Default::default);
    seen.len() >= 1 << 16 || seen.insert(hasher.finish())
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
    fn a_refusal_names_the_operation_the_path_the_errno_and_the_reason() {
        let invalid = FsError::Invalid("vectors/cell/x: 8 bytes".into());
        assert_eq!(
            refusal_line("close", "a.daf/vectors/cell/x.data", &invalid),
            "close of a.daf/vectors/cell/x.data refused (EINVAL): vectors/cell/x: 8 bytes"
        );
        let refused = FsError::NotPermitted("append-only".into());
        assert_eq!(
            refusal_line("unlink", "", &refused),
            "unlink refused (EPERM): append-only"
        );
    }

    fn io_content(errno: i32) -> FsError {
        FsError::Content(StoreError::Io {
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(errno),
        })
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
            (FsError::NoSpace("x".into()), libc::ENOSPC),
            (io_content(libc::ENOSPC), libc::ENOSPC),
            (io_content(libc::EDQUOT), libc::EDQUOT),
            (io_content(libc::ENOENT), libc::EIO),
            (
                FsError::Io(std::io::Error::from_raw_os_error(libc::ENOSPC)),
                libc::ENOSPC,
            ),
        ] {
            assert_eq!(errno(&error).code(), code);
        }
    }
}
