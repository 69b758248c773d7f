//! Mounting and unmounting through the setuid `fusermount3` helper (without root, or with
//! `auto_unmount`), as libfuse does, so that no fuser `Mount` exists that could unmount by path
//! when the session ends.
//!
//! `fusermount3 -o OPTIONS -- MNT` runs with `_FUSE_COMMFD` naming one end of a socket pair; it
//! opens `/dev/fuse`, mounts, and sends the descriptor back over the socket (`SCM_RIGHTS`).
//! Without `auto_unmount` it then exits. With `auto_unmount` it stays, and unmounts (lazily,
//! after its own checks) once the socket closes, that is once the daemon has ended.

use std::io::{IoSliceMut, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{
    recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

/// The helper's program.
pub const FUSERMOUNT: &str = "fusermount3";

/// Escapes `,` and `\` in an option value as libfuse does (`fuse_opt_add_opt_escaped`).
pub fn escape_option(value: &str) -> String {
    value.replace('\\', "\\\\").replace(',', "\\,")
}

/// A mount made by `fusermount3`: the `/dev/fuse` descriptor, and with `auto_unmount` the
/// socket that must stay open while the daemon lives.
#[derive(Debug)]
pub struct Fusermounted {
    /// The FUSE connection.
    pub device: OwnedFd,
    /// Kept open for `auto_unmount`: `fusermount3` unmounts when it closes.
    pub watch: Option<OwnedFd>,
}

/// Mounts with `fusermount3 -o options -- mountpoint`.
pub fn mount(
    mountpoint: &Path,
    options: &str,
    auto_unmount: bool,
) -> std::io::Result<Fusermounted> {
    mount_with(FUSERMOUNT, mountpoint, options, auto_unmount)
}

/// [`mount`] with another helper program (tests use a stand-in).
fn mount_with(
    program: &str,
    mountpoint: &Path,
    options: &str,
    auto_unmount: bool,
) -> std::io::Result<Fusermounted> {
    // Only the helper's end is inherited: if it also held ours, it would never see it close.
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    fcntl(&theirs, FcntlArg::F_SETFD(FdFlag::empty()))?;
    let mut helper = Command::new(program)
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    drop(theirs);
    let received = receive_fd(&ours);
    let Some(device) = received else {
        // The helper failed: its message says why.
        let mut message = String::new();
        if let Some(mut stderr) = helper.stderr.take() {
            let _ = stderr.read_to_string(&mut message);
        }
        let _ = helper.wait();
        let message = message
            .trim()
            .trim_start_matches("fusermount3: ")
            .to_string();
        return Err(std::io::Error::other(if message.is_empty() {
            format!("{FUSERMOUNT} failed")
        } else {
            format!("{FUSERMOUNT}: {message}")
        }));
    };
    if auto_unmount {
        // fusermount3 stays, watching the socket.
        drop(helper.stderr.take());
        Ok(Fusermounted {
            device,
            watch: Some(ours),
        })
    } else {
        drop(ours);
        let _ = helper.wait();
        Ok(Fusermounted {
            device,
            watch: None,
        })
    }
}

/// Receives the one descriptor `fusermount3` sends, if it sends one.
fn receive_fd(socket: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(std::os::fd::RawFd);
    let message = loop {
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.ok()?,
        }
    };
    let mut fds: Vec<std::os::fd::RawFd> = Vec::new();
    for control in message.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(received) = control {
            fds.extend(received);
        }
    }
    let mut owned = crate::sys::adopt_received_fds(&fds).into_iter();
    owned.next()
}

/// Unmounts `mountpoint` with `fusermount3 -u` (`-z`: lazily), for a user who may not
/// `umount(2)`. The caller has checked that the mount visible there is ours.
pub fn unmount(mountpoint: &Path, lazy: bool) -> std::io::Result<()> {
    let mut command = Command::new(FUSERMOUNT);
    command.arg("-u").arg("-q");
    if lazy {
        command.arg("-z");
    }
    let out = command
        .arg("--")
        .arg(mountpoint)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{FUSERMOUNT} -u: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for fusermount3: records its arguments, then either sends an open descriptor
    /// of `/dev/null` over `_FUSE_COMMFD` or fails with a message, as fusermount3 does.
    fn helper(dir: &Path, send: bool) -> String {
        let script = dir.join(if send { "fake-ok" } else { "fake-fail" });
        let body = if send {
            "fd = os.open('/dev/null', os.O_RDWR)\nsocket.send_fds(s, [b'\\0'], [fd])\n"
        } else {
            "sys.stderr.write('fusermount3: bad mount point /x: Not a directory\\n')\nsys.exit(1)\n"
        };
        std::fs::write(
            &script,
            format!(
                "#!/usr/bin/env python3\nimport os, socket, sys\n\
                 open(sys.argv[0] + '.argv', 'w').write('\\n'.join(sys.argv[1:]))\n\
                 s = socket.socket(fileno=int(os.environ['_FUSE_COMMFD']))\n{body}"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        script.to_str().unwrap().to_string()
    }

    #[test]
    fn the_descriptor_fusermount3_sends_is_received_and_its_errors_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let ok = helper(tmp.path(), true);
        let made = mount_with(&ok, Path::new("/mnt/x"), "fsname=a\\,b,ro", false).unwrap();
        assert!(made.watch.is_none());
        let received = std::fs::File::from(made.device).metadata().unwrap();
        let null = std::fs::metadata("/dev/null").unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(received.rdev(), null.rdev());
        let argv = std::fs::read_to_string(format!("{ok}.argv")).unwrap();
        assert_eq!(argv, "-o\nfsname=a\\,b,ro\n--\n/mnt/x");

        let fail = helper(tmp.path(), false);
        let error = mount_with(&fail, Path::new("/x"), "ro", false).unwrap_err();
        assert_eq!(
            error.to_string(),
            "fusermount3: bad mount point /x: Not a directory"
        );
    }

    #[test]
    fn option_values_are_escaped_like_libfuse() {
        assert_eq!(escape_option("/a,b\\c"), "/a\\,b\\\\c");
        assert_eq!(escape_option("plain"), "plain");
    }
}
