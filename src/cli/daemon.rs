//! Running the mount: checks, writer lock, mount, detach, signals, serve.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use nix::sys::signal::{SigSet, Signal};

use crate::core::DafFs;
use crate::formats::remote::{is_url, open_remote};
use crate::formats::source::{is_h5df, open_source, parse_source, Source, SourceSpec};
use crate::fuse::{mount_config, FuseAdapter, MountSettings};
use crate::staging::StagingArea;
use crate::stores::http::redact;
use crate::stores::zip::append::start_tail_writer;
use crate::sys::{fork, Forked};
use crate::views::anndata_refusal;

use super::lock::{lock_source, WriterLock};
use super::mount::{
    check_not_fuse, mount, unmount_own, MountInfo, MountRequest, Mounted, Unmounted,
};
use super::{Args, CliError, MountOptions};

/// Blocks of at least this size get their own memory map, returned when freed (decoded pieces
/// of the decode cache, above the 1 MiB of a FUSE reply).
const DECODED_BLOCK_MAP_THRESHOLD: usize = 2 << 20;

fn system(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
    let what = what.into();
    move |error| CliError::System { what, error }
}

fn check_mountpoint(path: &Path) -> Result<(), CliError> {
    let error = |why: &str| CliError::MountPoint {
        why: why.into(),
        path: path.to_path_buf(),
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(error("mount point is not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(error("mount point does not exist"))
        }
        Err(e) => Err(error(&format!("mount point is not usable ({e})"))),
    }
}

/// Mounts as `args` say and serves until unmounted. In background mode the calling process exits
/// (status 0) once the detached daemon has taken over; this function returns in the daemon.
pub fn run(args: Args) -> Result<(), CliError> {
    let (Some(source_arg), Some(mountpoint_arg)) = (args.source.clone(), args.mountpoint.clone())
    else {
        return Err(CliError::Option("SOURCE and MOUNTPOINT are needed".into()));
    };
    let mut options = MountOptions::parse(&args.options)?;
    let views = args.view_options(&options)?;
    let remote = is_url(&source_arg);
    if remote {
        if options.rw_given {
            return Err(CliError::Option(
                "a remote (http, https, s3) source is read-only: -o rw is not possible".into(),
            ));
        }
        options.read_only = true;
    }
    if is_h5df(&source_arg) {
        if options.rw_given {
            return Err(CliError::Option(
                "an H5df (HDF5) source is read-only (HDF5 has no crash-safe append): -o rw is \
                 not possible; copy it to a FilesDaf directory or a ZarrDaf to write"
                    .into(),
            ));
        }
        options.read_only = true;
    }
    check_mountpoint(&mountpoint_arg)?;
    let mountpoint = std::fs::canonicalize(&mountpoint_arg).map_err(|e| CliError::MountPoint {
        why: format!("mount point is not usable ({e})"),
        path: mountpoint_arg.clone(),
    })?;
    super::logging::set_mount(&mountpoint);
    check_not_fuse(&mountpoint)?;
    // The daemon is forked before it reads the source, while the process is single-threaded and
    // small (its parent waits until it is mounted, see `fork_daemon`): forked after, it shared
    // every page of the model and the tree with its parent, and after the parent had gone its
    // first write to each page still took a fault (the first commit into a 1M-entry archive
    // held the state lock 5.2 ms instead of 0.9 ms).
    let detaching = match args.foreground {
        true => None,
        false => Some(fork_daemon()?),
    };
    // Before reading the source, so that what is read is what no other writer is changing.
    let lock = if options.read_only {
        None
    } else {
        lock_source(&source_arg)?
    };
    // A writable ZIP source's helper is forked now, while the process is single-threaded and
    // small: forked after the source read, it shared every page of the model and the tree with
    // the daemon, and the first commit's writes then copied them (141,000 page faults, readers
    // stalled 11-16 ms behind the state lock at 1M entries). It keeps the writer lock, if any
    // (a file system without `flock` has none).
    let zip = matches!(parse_source(&source_arg), Ok(SourceSpec::Zip { .. }));
    if !options.read_only && zip {
        let keep: Vec<_> = lock.iter().map(WriterLock::raw_fd).collect();
        start_tail_writer(&keep).map_err(system("starting the ZIP tail writer"))?;
    }
    let decode_cache = crate::stores::decode_cache::cache();
    if let Some(limit) = options.decode_cache {
        decode_cache.set_limit(limit);
    }
    log::info!("decode cache: at most {} MiB", decode_cache.limit() >> 20);
    // Decoded pieces freed by the cache go back to the kernel (see `sys::map_large_blocks`);
    // FUSE replies (at most 1 MiB) stay below the threshold.
    if !crate::sys::map_large_blocks(DECODED_BLOCK_MAP_THRESHOLD) {
        log::info!("the C library keeps freed decoded pieces: RssAnon may exceed the decode cache");
    }
    let started = std::time::Instant::now();
    // What the opening logs is written once the source opened: a refused mount says only why.
    let source = super::logging::held(|| {
        let source = if remote {
            let http = options
                .http
                .clone()
                .with_environment()
                .map_err(CliError::Option)?;
            open_remote(&source_arg, &http)?
        } else if options.read_only {
            open_source(&source_arg)?
        } else {
            finish_interrupted_commit(open_source(&source_arg)?, &source_arg)?
        };
        match anndata_refusal(&source.datasets, &views) {
            Some(why) => Err(CliError::View(why)),
            None => Ok(source),
        }
    })?;
    // A URL is shown (log, fsname in /proc/mounts) without query string or user info.
    let shown = if remote {
        redact(&source_arg)
    } else {
        source_arg.clone()
    };
    log::info!("opened {shown} in {:?}", started.elapsed());
    let source_path = source.path.clone();
    let root_mtime = std::fs::metadata(&source.path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let staging = (!options.read_only).then(|| StagingArea::for_source(&source.path));
    let core = Arc::new(DafFs::with_staging(
        source.datasets,
        views,
        root_mtime,
        staging,
    ));
    if remote {
        // A reader walking the data set file by file has the next small files fetched ahead.
        core.enable_prefetch();
    }
    log::info!("built the tree in {:?}", started.elapsed());
    let adapter = FuseAdapter::new(
        core.clone(),
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    let notifier = adapter.notifier_slot();

    let threads = args
        .threads
        .or(options.threads)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let fsname = options.fsname.clone().unwrap_or_else(|| {
        if remote {
            shown.clone()
        } else {
            source_path.display().to_string()
        }
    });
    let config = mount_config(&MountSettings {
        fsname: fsname.clone(),
        allow_other: options.allow_other,
        allow_root: options.allow_root,
        auto_unmount: options.auto_unmount,
        threads,
        read_only: options.read_only,
    });
    let request = MountRequest {
        fsname,
        read_only: options.read_only,
        acl: config.acl,
        auto_unmount: options.auto_unmount,
    };

    // Checked before mounting, like everything that can fail.
    let ready = match args.ready_fd {
        Some(fd) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/self/fd/{fd}"))
                .map_err(system("--ready-fd"))?,
        ),
        None => None,
    };

    // Returns once the kernel has answered FUSE_INIT: the mount is usable, no thread started yet.
    let (session, mounted) = mount(adapter, &mountpoint, &config, &request)?;
    // The handshake's 16 MiB buffer is zeroed in the heap's free memory the source read left
    // (glibc serves it from a free chunk, not a fresh map) and freed: give those pages back
    // (16 MB of RssAnon at 1M entries).
    crate::sys::release_free_memory();
    let Mounted {
        path: mounted_on,
        mount: ours,
        watch,
    } = mounted;
    raise_readahead(&ours.device);
    if let Ok(mut slot) = notifier.lock() {
        *slot = Some(session.notifier());
    }
    let signal_target = (mounted_on.clone(), ours.clone());
    let serve = move || -> Result<(), CliError> {
        if let Some(detaching) = detaching {
            super::logging::tell_where();
            detaching.detach()?;
            super::logging::stop_stderr();
        }
        // Block the signals before any thread exists, so every FUSE worker inherits the mask
        // and only the waiting thread below receives them.
        let mut signals = SigSet::empty();
        for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            signals.add(signal);
        }
        signals
            .thread_block()
            .map_err(|e| system("blocking signals")(e.into()))?;
        let finisher = core.clone();
        if !options.read_only {
            // Items a killed daemon accepted but had not appended to a ZIP source yet.
            std::thread::spawn(move || core.recover());
        }
        std::thread::spawn(move || {
            if let Ok(signal) = signals.wait() {
                log::info!("{signal:?}: unmounting {}", mountpoint.display());
                if unmount_on_signal(&signal_target.0, &signal_target.1) == Some(Unmounted::Covered)
                {
                    // Our mount cannot be unmounted without the one on top of it: finish what
                    // an unmount finishes, then end; the kernel ends the connection with us.
                    if let Err(e) = finisher.finalize("") {
                        log::warn!("at exit: {e}");
                    }
                    std::process::exit(0);
                }
            }
        });
        if let Some(mut ready) = ready {
            ready.write_all(b"READY\n").map_err(system("--ready-fd"))?;
        }
        log::info!("mounted {shown} on {}", mountpoint_arg.display());
        // The session owns no mount, so it never unmounts when it ends (after an external
        // unmount, or ours on a signal).
        session.run().map_err(system("serving the mount"))?;
        log::info!("unmounted {}", mountpoint_arg.display());
        drop(watch);
        drop(lock);
        Ok(())
    };
    serve().inspect_err(|_| {
        // Nothing must stay mounted after a failure (checked: only our own mount).
        let _ = unmount_own(&mounted_on, &ours);
    })
}

/// Unmounts after SIGINT/SIGTERM/SIGHUP, only if our mount is still the one visible there.
fn unmount_on_signal(path: &Path, mount: &MountInfo) -> Option<Unmounted> {
    match unmount_own(path, mount) {
        Ok(Unmounted::AlreadyGone) => {
            log::info!("{} is no longer mounted here", path.display());
            Some(Unmounted::AlreadyGone)
        }
        Ok(Unmounted::Covered) => {
            log::warn!(
                "another mount covers {}: not unmounting it; ending (our mount stays, dead, \
                 under the other one until unmounted)",
                path.display()
            );
            Some(Unmounted::Covered)
        }
        Ok(done) => Some(done),
        Err(e) => {
            log::warn!("unmount of {} failed: {e}", path.display());
            None
        }
    }
}

/// Lets the kernel read ahead 1 MiB on the mount (FUSE starts at 128 KiB), which speeds up the
/// first and later reads of ZIP members. Best effort (needs root). The device comes from
/// /proc/self/mountinfo: a `stat` of the mount point would wait for the session, not running yet.
fn raise_readahead(device: &str) {
    let knob = format!("/sys/class/bdi/{device}/read_ahead_kb");
    if let Err(e) = std::fs::write(&knob, "1024") {
        log::debug!("{knob}: {e}");
    }
}

/// Forks the daemon (the process must be single-threaded). The parent exits 0 once the daemon
/// has detached ([`Detaching::detach`], once mounted), or with the daemon's status if it ended
/// first (it printed why on the terminal they share). Returns in the daemon.
fn fork_daemon() -> Result<Detaching, CliError> {
    let (read_end, write_end) = nix::unistd::pipe().map_err(|e| system("pipe")(e.into()))?;
    match fork().map_err(|e| system("fork")(e.into()))? {
        Forked::Parent(daemon) => {
            drop(write_end);
            let mut byte = [0u8; 1];
            let detached = loop {
                match nix::unistd::read(&read_end, &mut byte) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    read => break matches!(read, Ok(1)),
                }
            };
            let status = match detached {
                true => 0,
                false => match nix::sys::wait::waitpid(daemon, None) {
                    Ok(nix::sys::wait::WaitStatus::Exited(_, status)) => status,
                    _ => 1,
                },
            };
            // Exit without running destructors: the mount belongs to the daemon.
            std::process::exit(status);
        }
        Forked::Child => {
            drop(read_end);
            Ok(Detaching { write_end })
        }
    }
}

/// The daemon's end of the pipe its parent waits on ([`fork_daemon`]).
struct Detaching {
    write_end: std::os::fd::OwnedFd,
}

impl Detaching {
    /// Leaves the terminal's session and standard streams, then lets the parent exit.
    fn detach(self) -> Result<(), CliError> {
        nix::unistd::setsid().map_err(|e| system("setsid")(e.into()))?;
        let _ = nix::unistd::chdir("/");
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(system("/dev/null"))?;
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
        nix::unistd::write(&self.write_end, b"1").map_err(|e| system("detaching")(e.into()))?;
        Ok(())
    }
}

/// Finishes the swap of a commit that a killed daemon left half done (`staging::moves`: its
/// payload was renamed into the source, not copied), then opens the source again and brings its
/// index documents (`.zmetadata`, the root `zarr.json`, `metadata.json`) up to date. The
/// temporary files a killed daemon left in a directory source (`.daf-mount-tmp.*`) are removed
/// (and the source opened again: its first walk saw them).
fn finish_interrupted_commit(source: Source, arg: &str) -> Result<Source, CliError> {
    let staging = StagingArea::for_source(&source.path);
    let replayed = staging.replay_moves().map_err(|error| CliError::System {
        what: format!("finishing the commit left in {}", staging.root().display()),
        error,
    })?;
    let mut swept = 0;
    if source.path.is_dir() {
        match crate::stores::dir::remove_temporaries(&source.path) {
            Ok(n) => swept = n,
            Err(e) => log::warn!("removing the temporary files left in the source: {e}"),
        }
    }
    if swept > 0 {
        log::warn!("removed {swept} temporary files a killed daemon left in the source");
    }
    if !replayed && swept == 0 {
        return Ok(source);
    }
    drop(source);
    let source = open_source(arg)?;
    for ds in &source.datasets {
        if let Err(e) = crate::staging::commit::refresh_index_documents(ds) {
            log::warn!("updating the index documents of {}: {e}", ds.name);
        }
    }
    Ok(source)
}
