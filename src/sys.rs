//! The only module of daf-mount that contains `unsafe` code: read-only memory maps of source
//! files, the two C-Blosc calls that decode blosc-compressed foreign Zarr chunks, `fork`,
//! closing inherited descriptors, adopting descriptors received over a socket, fixing the C
//! allocator's threshold for memory-mapped blocks, handing the heap's free pages back
//! (`malloc_trim`), and the calls a ZIP append uses to stay out of the readers' way: lowering a
//! thread's CPU and I/O priority, the kernel's file-to-file copy (`copy_file_range`) and paced
//! writeback (`sync_file_range`); and the libhdf5 calls the `hdf5` crate does not wrap (a
//! datatype's class and padding, a chunk's place, for H5df sources; the bitfield and
//! NUL-terminated string datatypes the HDF5 files of `views::hdf5` are made with, and the release
//! of libhdf5's free lists after such a file is made).
//!
//! Everything above this module works with safe `&[u8]` views and `Vec<u8>` results.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;

pub use memmap2::Mmap;

/// Maps the whole of `file` read-only.
///
/// The contract daf-mount documents (doc/limits.md) is that a mounted source is not truncated
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

/// Forks the process (the daemon, before it reads the source).
///
/// Must be called while the process has a single thread.
pub fn fork() -> nix::Result<Forked> {
    // SAFETY: `fork` is unsafe because only async-signal-safe code may run in the child of a
    // multi-threaded process. daf-mount forks the daemon before it starts any thread (before it
    // reads the source, whose reading starts threads), so the child is a full copy of a
    // single-threaded process and may run any code.
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

/// What [`lower_thread_priority`] could lower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lowered {
    /// The thread runs under `SCHED_IDLE` (only when a CPU has nothing else to run), or, if
    /// that was refused, at nice 19.
    pub cpu: bool,
    /// Its I/O is in the lowest best-effort class (`IOPRIO_CLASS_BE`, level 7).
    pub io: bool,
}

/// Lowers the calling thread's (only this thread's, not the process's) CPU priority to
/// `SCHED_IDLE` (nice 19 if refused) and its I/O priority to best-effort level 7, for work that
/// must yield to the threads serving reads. An unprivileged thread cannot raise it back, so run
/// it on a thread of its own that ends with the work.
pub fn lower_thread_priority() -> Lowered {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` with pid 0 changes only the calling thread's policy; it
        // reads the `sched_param` we pass by a valid pointer (priority 0, the only one
        // `SCHED_IDLE` accepts) and touches no memory of ours.
        let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0;
        let cpu = idle || {
            // SAFETY: `gettid` takes no argument and cannot fail.
            let tid = unsafe { libc::gettid() };
            let who = libc::id_t::try_from(tid).unwrap_or(0);
            // SAFETY: integer arguments only; on Linux, PRIO_PROCESS with a thread id changes
            // only that thread's nice value (here, the calling thread's).
            who != 0 && unsafe { libc::setpriority(libc::PRIO_PROCESS, who, 19) } == 0
        };
        // ioprio_set(IOPRIO_WHO_PROCESS, 0 = the calling thread, IOPRIO_PRIO_VALUE(BE, 7)).
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_BE_LOWEST: libc::c_long = (2 << 13) | 7;
        // SAFETY: a raw system call with three integer arguments and no pointer; it changes
        // only the calling thread's I/O priority (its own I/O context) and fails cleanly
        // (ENOSYS, EPERM) where it is not allowed.
        let io = unsafe {
            libc::syscall(
                libc::SYS_ioprio_set,
                IOPRIO_WHO_PROCESS,
                0,
                IOPRIO_BE_LOWEST,
            )
        } == 0;
        Lowered { cpu, io }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Lowered {
            cpu: false,
            io: false,
        }
    }
}

/// Thread `tid`'s (0: the calling thread's) scheduling policy and I/O priority as the kernel
/// reports them (`sched_getscheduler`, `ioprio_get`; -1 where it cannot): for the tests of
/// [`lower_thread_priority`] and of its callers.
#[cfg(test)]
pub fn thread_priority(tid: i32) -> (i32, i64) {
    // SAFETY: both are query-only calls about one thread of ours, with integer arguments only.
    let policy = unsafe { libc::sched_getscheduler(tid) };
    // SAFETY: as above (IOPRIO_WHO_PROCESS = 1, then the thread id).
    let ioprio = unsafe {
        libc::syscall(
            libc::SYS_ioprio_get,
            1 as libc::c_long,
            libc::c_long::from(tid),
        )
    };
    (policy, ioprio)
}

/// Copies `len` bytes of `from` at `from_at` into `to` at `to_at` inside the kernel
/// (`copy_file_range`: no user-space buffer; on file systems that share extents, no copy at
/// all). Returns how many bytes it copied: fewer than `len` (even 0) at the end of `from`; an
/// error (`EXDEV`, `EINVAL`, `EOPNOTSUPP`, `ENOSYS`) where the kernel cannot copy between these
/// two files, for the caller to copy itself. Neither file's position is used or moved.
pub fn copy_range(from: &File, from_at: u64, to: &File, to_at: u64, len: u64) -> io::Result<u64> {
    let mut from_at =
        i64::try_from(from_at).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut to_at =
        i64::try_from(to_at).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let copied = nix::fcntl::copy_file_range(from, Some(&mut from_at), to, Some(&mut to_at), len)?;
    Ok(copied as u64)
}

/// Starts the writeback of the dirty pages of `file` in `[at, at + len)` without waiting for
/// it (`sync_file_range(SYNC_FILE_RANGE_WRITE)`): no file metadata, no disk cache flush, so it
/// is no substitute for `fsync`; it spreads the writing of a large copy over the copy.
pub fn start_writeback(file: &File, at: u64, len: u64) -> io::Result<()> {
    sync_range(file, at, len, libc::SYNC_FILE_RANGE_WRITE)
}

/// Waits until the pages of `file` in `[at, at + len)` are written (starting the writeback of
/// those still dirty): `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)`. A write error is
/// reported here (and then no longer by a later `fsync` of the same descriptor), so the caller
/// must treat an error as the write's failure.
pub fn wait_writeback(file: &File, at: u64, len: u64) -> io::Result<()> {
    sync_range(
        file,
        at,
        len,
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
    )
}

fn sync_range(file: &File, at: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let at =
        libc::off64_t::try_from(at).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let len =
        libc::off64_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: integer arguments only and a descriptor `file` owns and keeps open for the call;
    // the call touches no memory of ours.
    match unsafe { libc::sync_file_range(file.as_raw_fd(), at, len, flags) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Whether the HDF5 datatype `dtype` is of class bitfield (`H5T_BITFIELD`: how HDF5.jl stores a
/// Julia `Bool`, which the `hdf5` crate's type descriptors do not cover).
pub fn hdf5_is_bitfield(dtype: &hdf5_metno::Datatype) -> bool {
    let id = dtype.id();
    hdf5_metno::sync::sync(|| {
        // SAFETY: `id` is the identifier of a datatype that `dtype` keeps open for the duration
        // of this call; `H5Tget_class` only reads it (an invalid id returns H5T_NO_CLASS), and
        // the library's global lock is held (`sync`) because libhdf5 is not thread-safe.
        let class = unsafe { hdf5_sys::h5t::H5Tget_class(id) };
        class == hdf5_sys::h5t::H5T_class_t::H5T_BITFIELD
    })
}

/// Whether the fixed-length HDF5 string datatype `dtype` pads with spaces (`H5T_STR_SPACEPAD`, as
/// some foreign writers do) rather than NULs (HDF5.jl's `NULLTERM`, or `NULLPAD`).
pub fn hdf5_is_spacepad(dtype: &hdf5_metno::Datatype) -> bool {
    let id = dtype.id();
    hdf5_metno::sync::sync(|| {
        // SAFETY: as in `hdf5_is_bitfield`: a datatype `dtype` keeps open, only read, under the
        // library's global lock (a type that is not a string gives H5T_STR_ERROR).
        let pad = unsafe { hdf5_sys::h5t::H5Tget_strpad(id) };
        pad == hdf5_sys::h5t::H5T_str_t::H5T_STR_SPACEPAD
    })
}

/// Where the chunk of chunked dataset `dataset` whose first element is at `coords` (C order) is
/// stored: its filter mask, file address and stored size; `None` when it is not stored (or the
/// call fails). One B-tree lookup (`H5Dget_chunk_info_by_coord`), where the crate's
/// `chunk_info(index)` walks the index up to `index` at every call.
pub fn hdf5_chunk_at(dataset: &hdf5_metno::Dataset, coords: &[u64]) -> Option<(u32, u64, u64)> {
    if coords.len() != dataset.ndim() {
        return None;
    }
    let id = dataset.id();
    hdf5_metno::sync::sync(|| {
        let (mut mask, mut addr, mut size) = (0u32, 0u64, 0u64);
        // SAFETY: `id` is a dataset identifier `dataset` keeps open during this call; `coords`
        // holds exactly one offset per dimension of its dataspace (checked above), which is all
        // the library reads from it; the three out pointers are valid for one write each; the
        // library's global lock is held (`sync`).
        let status = unsafe {
            hdf5_sys::h5d::H5Dget_chunk_info_by_coord(
                id,
                coords.as_ptr(),
                &mut mask,
                &mut addr,
                &mut size,
            )
        };
        (status >= 0 && addr != hdf5_sys::h5::HADDR_UNDEF).then_some((mask, addr, size))
    })
}

/// Frees what libhdf5 keeps on its free lists (`H5garbage_collect`) after a file it made is
/// closed, then gives the heap's free pages back (`release_free_memory`).
pub fn hdf5_release_memory() {
    hdf5_metno::sync::sync(|| {
        // SAFETY: no arguments; the library frees only the blocks on its own free lists, which
        // no live object uses; under the library's global lock (`sync`).
        unsafe { hdf5_sys::h5::H5garbage_collect() };
    });
    release_free_memory();
}

/// A new HDF5 datatype made from the library's `make` (a predefined type's copy, adjusted):
/// `Err` when a call fails.
fn hdf5_new_type(
    make: impl FnOnce() -> hdf5_sys::h5i::hid_t,
) -> hdf5_metno::Result<hdf5_metno::Datatype> {
    hdf5_metno::sync::sync(|| {
        let id = make();
        if id < 0 {
            return Err(hdf5_metno::Error::from(
                "an HDF5 datatype could not be made",
            ));
        }
        // SAFETY: `id` is a datatype identifier the library just created for us (refcount 1,
        // owned by no one else); `from_id` takes that reference over, so the handle closes it
        // once; the library's global lock is held (`sync`).
        unsafe { hdf5_metno::from_id::<hdf5_metno::Datatype>(id) }
    })
}

/// The 8-bit little-endian bitfield `H5T_STD_B8LE`: how HDF5.jl stores a Julia `Bool`
/// (`h5df-format.md` §3.1), which the `hdf5` crate's type descriptors do not cover.
pub fn hdf5_bitfield_type() -> hdf5_metno::Result<hdf5_metno::Datatype> {
    hdf5_new_type(|| {
        // SAFETY: `H5T_STD_B8LE` is a predefined type, valid once the library is initialised
        // (the crate's `sync` does that); `H5Tcopy` only reads it and returns a new identifier
        // (or a negative value), under the library's global lock held by the caller.
        unsafe { hdf5_sys::h5t::H5Tcopy(*hdf5_sys::h5t::H5T_STD_B8LE) }
    })
}

/// A fixed-length UTF-8 string type of `size` bytes (at least 1), padded `NULLTERM`: how
/// HDF5.jl stores a String scalar (`h5df-format.md` §3.2; the crate's fixed strings are
/// `NULLPAD`).
pub fn hdf5_fixed_utf8_type(size: usize) -> hdf5_metno::Result<hdf5_metno::Datatype> {
    use hdf5_sys::h5t::{H5T_cset_t, H5T_str_t};
    hdf5_new_type(|| {
        // SAFETY: `H5T_C_S1` is a predefined type, valid once the library is initialised;
        // `H5Tcopy` returns a new identifier that only this closure uses, and the three setters
        // take it and plain values; every call runs under the library's global lock, held by
        // the caller. A failing setter leaves the copy to be closed here.
        unsafe {
            let id = hdf5_sys::h5t::H5Tcopy(*hdf5_sys::h5t::H5T_C_S1);
            if id < 0 {
                return id;
            }
            let ok = hdf5_sys::h5t::H5Tset_size(id, size.max(1)) >= 0
                && hdf5_sys::h5t::H5Tset_cset(id, H5T_cset_t::H5T_CSET_UTF8) >= 0
                && hdf5_sys::h5t::H5Tset_strpad(id, H5T_str_t::H5T_STR_NULLTERM) >= 0;
            if !ok {
                hdf5_sys::h5t::H5Tclose(id);
                return -1;
            }
            id
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowering_a_threads_priority_leaves_the_other_threads_alone() {
        let before = thread_priority(0);
        let (lowered, inside) =
            std::thread::spawn(|| (lower_thread_priority(), thread_priority(0)))
                .join()
                .unwrap();
        assert_eq!(
            lowered,
            Lowered {
                cpu: true,
                io: true
            }
        );
        assert_eq!(inside, (libc::SCHED_IDLE, (2 << 13) | 7));
        assert_eq!(thread_priority(0), before);
        assert_eq!(before.0, libc::SCHED_OTHER);
    }
}
