//! How daf-mount mounts: fuser options from the command line's settings. The daemon mounts by
//! itself (`cli::mount`) and uses the session settings here (threads, `clone_fd`, ACL); the
//! mount options are used where fuser mounts (in-process test mounts).

use fuser::{Config, MountOption, SessionACL};

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountSettings {
    /// What `df`/`findmnt` show as the source.
    pub fsname: String,
    /// `allow_other`.
    pub allow_other: bool,
    /// `allow_root`.
    pub allow_root: bool,
    /// `auto_unmount` (needs one of the above).
    pub auto_unmount: bool,
    /// Worker threads.
    pub threads: usize,
    /// Mount read-only (`-o ro`): the kernel refuses every write.
    pub read_only: bool,
}

/// The fuser configuration for these settings: a read-only `fuse.daf-mount` mount.
pub fn mount_config(settings: &MountSettings) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(settings.fsname.clone()),
        // fuser 0.18 drops MountOption::Subtype on the direct-mount path; this form survives.
        MountOption::CUSTOM("subtype=daf-mount".into()),
        if settings.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    if settings.auto_unmount {
        config.mount_options.push(MountOption::AutoUnmount);
    }
    config.acl = match (settings.allow_other, settings.allow_root) {
        (true, _) => SessionACL::All,
        (false, true) => SessionACL::RootAndOwner,
        _ => SessionACL::Owner,
    };
    // A writable mount needs a second worker: one may wait in a cache invalidation while the
    // other answers the request the kernel is holding a lock for.
    let threads = if settings.read_only {
        settings.threads.max(1)
    } else {
        settings.threads.max(2)
    };
    config.n_threads = Some(threads);
    config.clone_fd = threads > 1;
    config
}
