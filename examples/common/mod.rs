//! What the FUSE examples of issue 12's rows (the read and listing ceilings, the commit rows'
//! floor) share with daf-mount: its session settings and the readahead it sets on its mount.

use std::path::Path;

use daf_mount::fuse::MountSettings;

/// daf-mount's session settings for an example named `fsname`, with `threads` worker threads
/// (the command line's, else as many as CPUs, as daf-mount).
pub fn settings(
    fsname: &str,
    threads: Option<&String>,
    read_only: bool,
) -> Result<MountSettings, std::num::ParseIntError> {
    let threads = match threads {
        Some(n) => n.parse()?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    Ok(MountSettings {
        fsname: fsname.into(),
        allow_other: false,
        allow_root: false,
        auto_unmount: false,
        threads,
        read_only,
    })
}

/// As the daemon does: 1 MiB of readahead on the mount's bdi (FUSE starts at 128 KiB).
pub fn set_readahead(fsname: &str, mountpoint: &Path) {
    if let Some(device) = device_of(mountpoint) {
        let knob = format!("/sys/class/bdi/{device}/read_ahead_kb");
        if let Err(e) = std::fs::write(&knob, "1024") {
            eprintln!("{fsname}: {knob}: {e}");
        }
    }
}

/// The mount's device (`MAJOR:MINOR`), from /proc/self/mountinfo.
fn device_of(mountpoint: &Path) -> Option<String> {
    let wanted = mountpoint.canonicalize().ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (fields.get(4).map(Path::new) == Some(wanted.as_path()))
            .then(|| fields.get(2).map(|d| d.to_string()))
            .flatten()
    })
}
