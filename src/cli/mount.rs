//! Mounting and unmounting safely: daf-mount only ever unmounts its own mount.
//!
//! fuser 0.18 unmounts by path when a session ends (`UmountOnDrop`), and its "still mounted?"
//! test is inverted (a dead connection reads as mounted), so after an external `fusermount3 -u`
//! it unmounted whatever was mounted *below* the mount point. daf-mount therefore mounts by
//! itself: as root it opens `/dev/fuse` and calls `mount(2)` as fuser would; otherwise (or with
//! `auto_unmount`) it runs `fusermount3` as libfuse does ([`super::fusermount`]). It hands the
//! descriptor to `Session::from_fd`, a session that holds no mount and never unmounts. It
//! records its mount's id from `/proc/self/mountinfo`, and a signal unmounts the mount point
//! only while that id is still mounted there and not covered by another mount.
//!
//! Before mounting, a mount point whose top mount is already a FUSE file system is refused.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fuser::{Config, Filesystem, Session, SessionACL};
use nix::mount::{umount2, MntFlags, MsFlags};

use super::fusermount;
use super::CliError;

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInfo {
    /// Mount id.
    pub id: u64,
    /// Id of the mount it is mounted on.
    pub parent: u64,
    /// `major:minor` of its file system.
    pub device: String,
    /// Where it is mounted (unescaped).
    pub mount_point: PathBuf,
    /// File system type (`fuse.daf-mount`, `tmpfs`, ...).
    pub fstype: String,
    /// Mount source (`fsname`).
    pub source: String,
}

fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/self/mountinfo` text (lines that do not parse are skipped).
pub fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(MountInfo {
                id: fields.first()?.parse().ok()?,
                parent: fields.get(1)?.parse().ok()?,
                device: (*fields.get(2)?).to_string(),
                mount_point: PathBuf::from(unescape(fields.get(4)?)),
                fstype: unescape(fields.get(dash + 1)?),
                source: unescape(fields.get(dash + 2)?),
            })
        })
        .collect()
}

/// The mounts of this process's mount namespace.
pub fn mountinfo() -> Vec<MountInfo> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// The mount visible at `path`: the one mounted there that no other mount there covers.
pub fn top_mount(mounts: &[MountInfo], path: &Path) -> Option<MountInfo> {
    let here: Vec<&MountInfo> = mounts.iter().filter(|m| m.mount_point == path).collect();
    here.iter()
        .find(|m| !here.iter().any(|o| o.parent == m.id))
        .map(|m| (*m).clone())
}

/// Refuses a mount point (canonical path) that already shows a FUSE file system: another
/// daf-mount (or any FUSE mount) there would be hidden, and unmounting would become ambiguous.
pub fn check_not_fuse(mountpoint: &Path) -> Result<(), CliError> {
    match top_mount(&mountinfo(), mountpoint) {
        Some(m) if m.fstype == "fuse" || m.fstype.starts_with("fuse.") => {
            let what = if m.fstype == "fuse.daf-mount" {
                format!("a daf-mount of {}", m.source)
            } else {
                format!("a {} file system ({})", m.fstype, m.source)
            };
            Err(CliError::MountPoint {
                why: format!("mount point already holds {what}; unmount it first"),
                path: mountpoint.to_path_buf(),
            })
        }
        _ => Ok(()),
    }
}

/// Our mount: where, its mountinfo line (id and `major:minor` of its connection), and with
/// `auto_unmount` the socket `fusermount3` watches (closed when the daemon ends).
#[derive(Debug)]
pub struct Mounted {
    /// The mount point (canonical).
    pub path: PathBuf,
    /// Its line in `/proc/self/mountinfo` when it was made.
    pub mount: MountInfo,
    /// Kept open while the daemon lives (`auto_unmount`).
    pub watch: Option<OwnedFd>,
}

/// How to mount: kernel flags and options, and the settings `fusermount3` needs as well.
#[derive(Clone, Debug)]
pub struct MountRequest {
    /// What `df`/`findmnt` show as the source.
    pub fsname: String,
    /// Read-only mount.
    pub read_only: bool,
    /// Who may use it (`allow_other` for anything but the owner; fuser filters root-only).
    pub acl: SessionACL,
    /// Let `fusermount3` unmount once the daemon ends.
    pub auto_unmount: bool,
}

/// Mounts `fs` on `mountpoint` (canonical), with `mount(2)` when permitted and `auto_unmount`
/// is not asked for, else through `fusermount3`. Either way the session owns no fuser `Mount`,
/// so it never unmounts. Returns once the kernel has answered `FUSE_INIT`.
pub fn mount<FS: Filesystem>(
    fs: FS,
    mountpoint: &Path,
    config: &Config,
    request: &MountRequest,
) -> Result<(Session<FS>, Mounted), CliError> {
    let failed = |error: std::io::Error| CliError::System {
        what: format!("cannot mount on {}", mountpoint.display()),
        error,
    };
    let before: Vec<u64> = mountinfo().iter().map(|m| m.id).collect();
    let direct = if request.auto_unmount {
        None
    } else {
        let (flags, data) = kernel_options(request.read_only, request.acl);
        mount_direct(mountpoint, &data, flags, &request.fsname).map_err(failed)?
    };
    let (device, watch) = match direct {
        Some(device) => (device, None),
        None => {
            log::info!("mounting through {}", fusermount::FUSERMOUNT);
            let made = fusermount::mount(
                mountpoint,
                &fusermount_options(request),
                request.auto_unmount,
            )
            .map_err(failed)?;
            (made.device, made.watch)
        }
    };
    let Some(mount) = top_mount(&mountinfo(), mountpoint).filter(|m| !before.contains(&m.id))
    else {
        // Never seen: our mount is not the one visible there. Drop the connection (the mount,
        // if any, then answers ENOTCONN) rather than unmount something by path.
        drop(device);
        return Err(failed(std::io::Error::other(
            "mounted, but the mount is not in /proc/self/mountinfo",
        )));
    };
    let session = Session::from_fd(fs, device, config.acl, config.clone()).map_err(failed)?;
    Ok((
        session,
        Mounted {
            path: mountpoint.to_path_buf(),
            mount,
            watch,
        },
    ))
}

/// The `-o` options for `fusermount3`.
fn fusermount_options(request: &MountRequest) -> String {
    let mut options = vec![
        format!("fsname={}", fusermount::escape_option(&request.fsname)),
        "subtype=daf-mount".to_string(),
        "default_permissions".to_string(),
        "nosuid".to_string(),
        "nodev".to_string(),
        "noatime".to_string(),
        if request.read_only { "ro" } else { "rw" }.to_string(),
    ];
    if request.acl != SessionACL::Owner {
        options.push("allow_other".into());
    }
    if request.auto_unmount {
        options.push("auto_unmount".into());
    }
    options.join(",")
}

/// `mount(2)` of a FUSE file system as fuser does it; `None` when not permitted (not root).
fn mount_direct(
    mountpoint: &Path,
    data: &str,
    flags: MsFlags,
    fsname: &str,
) -> std::io::Result<Option<OwnedFd>> {
    let rootmode = File::open(mountpoint)?.metadata()?.permissions().mode();
    let device = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(device) => device,
        // Not ours to open (mode 0600 for root): fusermount3 opens it.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => return Err(e),
    };
    let data = format!(
        "fd={},rootmode={rootmode:o},user_id={},group_id={},{data}",
        device.as_raw_fd(),
        nix::unistd::getuid(),
        nix::unistd::getgid(),
    );
    match nix::mount::mount(
        Some(fsname),
        mountpoint,
        Some("fuse"),
        flags,
        Some(data.as_str()),
    ) {
        Ok(()) => Ok(Some(OwnedFd::from(device))),
        Err(nix::errno::Errno::EPERM) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What [`unmount_own`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Our mount was on top and is unmounted (lazily if it was busy).
    Done,
    /// Our mount is gone already (unmounted from outside).
    AlreadyGone,
    /// Another mount covers ours: nothing was unmounted (unmounting the mount point would
    /// unmount the other one).
    Covered,
}

/// Unmounts `path` only if the mount visible there is `mount` (ours).
pub fn unmount_own(path: &Path, mount: &MountInfo) -> std::io::Result<Unmounted> {
    let mounts = mountinfo();
    if !mounts.iter().any(|m| m.id == mount.id) {
        return Ok(Unmounted::AlreadyGone);
    }
    if top_mount(&mounts, path).map(|m| m.id) != Some(mount.id) {
        return Ok(Unmounted::Covered);
    }
    if unmount_path(path, false).is_ok() {
        return Ok(Unmounted::Done);
    }
    // Busy (files open): detach now, after checking again that ours is still on top; the
    // session ends when the last user closes.
    log::warn!("{} is busy; detaching lazily", path.display());
    if top_mount(&mountinfo(), path).map(|m| m.id) != Some(mount.id) {
        return Ok(Unmounted::AlreadyGone);
    }
    unmount_path(path, true)?;
    Ok(Unmounted::Done)
}

/// `umount2(path)`, or `fusermount3 -u` for a user who may not unmount.
fn unmount_path(path: &Path, lazy: bool) -> std::io::Result<()> {
    let flags = if lazy {
        MntFlags::MNT_DETACH
    } else {
        MntFlags::empty()
    };
    match umount2(path, flags) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => fusermount::unmount(path, lazy),
        Err(e) => Err(e.into()),
    }
}

/// The kernel mount flags and data options (after `fd=...,user_id=...`) for these settings.
pub fn kernel_options(read_only: bool, acl: SessionACL) -> (MsFlags, String) {
    let mut flags = MsFlags::MS_NODEV | MsFlags::MS_NOSUID | MsFlags::MS_NOATIME;
    if read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    let mut data = String::from("subtype=daf-mount,default_permissions");
    if acl != SessionACL::Owner {
        data.push_str(",allow_other");
    }
    (flags, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/root rw
40 22 0:35 / /mnt/x\\040y rw,relatime shared:20 - tmpfs tmpfs rw
41 40 0:36 / /mnt/x\\040y rw,nosuid,nodev,noatime - fuse.daf-mount /d/a\\040b.daf rw,user_id=0
42 22 0:37 / /mnt/z rw - fuse sshfs#h: rw
bad line";

    #[test]
    fn mountinfo_lines_parse_with_escapes_and_the_top_mount_is_the_uncovered_one() {
        let mounts = parse_mountinfo(INFO);
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[1].mount_point, Path::new("/mnt/x y"));
        assert_eq!(mounts[2].source, "/d/a b.daf");
        assert_eq!(mounts[2].device, "0:36");
        let top = top_mount(&mounts, Path::new("/mnt/x y")).unwrap();
        assert_eq!((top.id, top.fstype.as_str()), (41, "fuse.daf-mount"));
        // With the FUSE mount gone, the tmpfs below is what shows.
        let below: Vec<MountInfo> = mounts.iter().filter(|m| m.id != 41).cloned().collect();
        assert_eq!(top_mount(&below, Path::new("/mnt/x y")).unwrap().id, 40);
        assert!(top_mount(&mounts, Path::new("/mnt")).is_none());
    }

    #[test]
    fn kernel_options_follow_the_settings() {
        let (flags, data) = kernel_options(true, SessionACL::All);
        assert!(flags.contains(MsFlags::MS_RDONLY | MsFlags::MS_NOSUID));
        assert_eq!(data, "subtype=daf-mount,default_permissions,allow_other");
        let (flags, data) = kernel_options(false, SessionACL::Owner);
        assert!(!flags.contains(MsFlags::MS_RDONLY));
        assert!(!data.contains("allow_other"));
    }
}
