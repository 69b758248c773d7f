//! The only module of daf-mount that contains `unsafe` code: read-only memory maps of source
//! files, the two C-Blosc calls that decode blosc-compressed foreign Zarr chunks, `fork`,
//! closing inherited descriptors, adopting descriptors received over a socket, fixing the C
//! allocator's threshold for memory-mapped blocks, and handing the heap's free pages back
//! (`malloc_trim`).
//!
//! Everything above this module works with safe `&[u8]` views and `Vec<u8>` results.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;

pub use memmap2::Mmap;

/// Maps the whole of `file` read-only.
///
/// The contract daf-mount documents (README, "Limits") is that a mounted source is not truncated
/// or rewritten in place while mounted; new data is only ever added as new files or appended ZIP
/// entries. If that contract is broken, a read through FUSE fails with `EFAULT` inside the
/// kernel's copy, but code of ours that parses mapped bytes directly could take a `SIGBUS`.
pub fn map_readonly(file: &File) -> io::Result<Mmap> {
    // SAFETY: `Mmap::map` is unsafe because another process may modify or truncate the file while
    // it is mapped, changing or invalidating memory we hand out as `&[u8]`. daf-mount never writes
    // to or truncates a file it has mapped, and the documented contract is that nobody else does.
    unsafe { Mmap::map(file) }
}

/// A read-only anonymous map of `len` zero bytes (`len` > 0): the pages are the kernel's shared
/// zero page until touched, and never touched (read-only), so a huge all-zero array costs no
/// memory. Safe code (memmap2's anonymous maps have no aliasing hazard); kept here with the
/// other maps.
pub fn map_zeros(len: usize) -> io::Result<Mmap> {
    memmap2::MmapOptions::new()
        .len(len)
        .map_anon()?
        .make_read_only()
}

/// Decompresses one Blosc (version 1 format) buffer, as written by numcodecs' `Blosc` codec.
pub fn blosc_decompress(src: &[u8]) -> Result<Vec<u8>, String> {
    let mut nbytes: usize = 0;
    // SAFETY: `src` is a valid readable buffer of `src.len()` bytes and `nbytes` a valid out
    // pointer; `blosc_cbuffer_validate` only reads within `src.len()` and reports the
    // uncompressed size, and is documented to make the subsequent decompression call safe.
    let valid =
        unsafe { blosc_src::blosc_cbuffer_validate(src.as_ptr().cast(), src.len(), &mut nbytes) };
    if valid != 0 {
        return Err("not a valid blosc buffer".into());
    }
    let mut out = vec![0u8; nbytes];
    if nbytes == 0 {
        return Ok(out);
    }
    // SAFETY: the buffer was validated above; `out` is a writable buffer of exactly `nbytes`
    // bytes and C-Blosc guarantees never to write beyond `destsize`. The context API takes no
    // global lock and is safe to call from several threads at once.
    let written = unsafe {
        blosc_src::blosc_decompress_ctx(src.as_ptr().cast(), out.as_mut_ptr().cast(), nbytes, 1)
    };
    match usize::try_from(written) {
        Ok(n) if n == nbytes => Ok(out),
        _ => Err(format!("blosc decompression failed (code {written})")),
    }
}

/// Which side of a [`fork`] we are on.
pub enum Forked {
    /// The original process; carries the child's pid.
    Parent(nix::unistd::Pid),
    /// The new process.
    Child,
}

/// Forks the process (to detach the daemon once the mount is ready).
///
/// Must be called while the process has a single thread.
pub fn fork() -> nix::Result<Forked> {
    // SAFETY: `fork` is unsafe because only async-signal-safe code may run in the child of a
    // multi-threaded process. daf-mount forks before it starts any thread (the FUSE session has
    // mounted and completed its handshake, but its worker threads start only after the fork), so
    // the child is a full copy of a single-threaded process and may run any code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
    }
}

/// Takes ownership of descriptors just received in an `SCM_RIGHTS` control message (the
/// `/dev/fuse` descriptor `fusermount3` sends back), so that they are closed when dropped.
pub fn adopt_received_fds(fds: &[std::os::fd::RawFd]) -> Vec<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    fds.iter()
        .filter(|fd| **fd >= 0)
        // SAFETY: the kernel installed each of these descriptors in this process when it
        // delivered the SCM_RIGHTS message, and nothing else refers to them: the caller passes
        // them here once, straight from `recvmsg`, so each gets exactly one owner.
        .map(|fd| unsafe { std::os::fd::OwnedFd::from_raw_fd(*fd) })
        .collect()
}

/// Closes every file descriptor of this process except `keep` (in a freshly forked helper, so
/// that it does not keep the FUSE connection, or anything else of the daemon's, open).
pub fn close_other_fds(keep: &[std::os::fd::RawFd]) {
    let Ok(listing) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<std::os::fd::RawFd> = listing
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| !keep.contains(fd))
        .collect();
    for fd in fds {
        // SAFETY: called only in a just-forked, single-threaded helper that never returns to the
        // code owning these descriptors (it ends with `process::exit`), so no `OwnedFd` or `File`
        // of ours will use or close them again. Closing an fd that is already closed (the one
        // `read_dir` used) only returns EBADF.
        unsafe {
            libc::close(fd);
        }
    }
}

/// Makes the C allocator (glibc) serve every block of at least `bytes` from its own memory map,
/// given back to the kernel when it is freed, and stop moving that threshold. By default glibc
/// raises the threshold each time such a block is freed (up to 32 MiB), after which blocks of
/// that size come from its per-thread arenas, which keep freed memory: the decode cache, which
/// frees and allocates decoded pieces of a few MiB all the time, then costs tens of MiB more
/// than its bound (1 GiB of 4 MiB zlib chunks read with the default 256 MiB cache: RssAnon
/// 312–339 MiB, 261 MiB with the threshold fixed at 2 MiB). Whether the setting was taken
/// (false on other C libraries).
pub fn map_large_blocks(bytes: usize) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let Ok(bytes) = libc::c_int::try_from(bytes) else {
            return false;
        };
        // SAFETY: `mallopt` only changes a tuning parameter of glibc's allocator, under its own
        // lock; any positive value is valid for M_MMAP_THRESHOLD (glibc rejects values above its
        // maximum by returning 0). Blocks already allocated are unaffected.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = bytes;
        false
    }
}

/// Gives the heap's free pages back to the system (glibc's `malloc_trim(0)`): after a tree is
/// rebuilt, the previous tree's and the rendering's freed memory would otherwise stay in the
/// daemon's RssAnon, as small free chunks between live ones.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer, only walks glibc's own arenas under their locks, and
    // is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
