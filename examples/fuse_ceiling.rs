//! The FUSE ceiling of issue 12: the smallest filesystem that serves one byte range of one file
//! (a ZIP member) from a read-only map, with daf-mount's session settings and nothing else. It
//! shows one file, `data`, at its root: no views, no staging, no page-cache filler, one lookup.
//!
//! Given a URL instead of a file (issue 33), it serves the object at that URL: each read of the
//! kernel is one ranged GET on its worker thread's keep-alive connection, the body received
//! straight into that thread's buffer and replied from it. That is the least any daemon must do
//! to show a remote object through the page cache (the kernel copies the bytes out of the socket
//! and into the page cache, nothing else): no readahead of its own, no cache, no HTTP library.
//! `scripts/bench_http.py` measures daf-mount's localhost first read against it.
//!
//! Given `splice:http://…`, it does less still: the kernel copies each body once, from the
//! socket's buffers into the page cache. The body is spliced from the socket into a pipe behind
//! the reply's header and the pipe into `/dev/fuse` (one worker thread reads the requests; four
//! answer them, each on its own connection and pipe, writing the replies past fuser). Its 4 MiB
//! pipes need `CAP_SYS_RESOURCE` or a raised `/proc/sys/fs/pipe-max-size` (the bench raises it
//! for the run). This is the zero-copy path neither ureq nor fuser offers: it measures what such a
//! path could gain.
//!
//! Same settings as daf-mount's: fuser 0.18, the same `mount_config` (worker threads, `clone_fd`,
//! read-only), `FOPEN_KEEP_CACHE` on open, replies borrowed from the map (no copy in the daemon),
//! and 1 MiB of readahead on the mount's bdi, as the daemon sets it. `scripts/bench_ceiling.py`
//! measures daf-mount's ZIP rows against it.
//!
//! ```text
//! cargo run --release --example fuse_ceiling -- ARCHIVE OFFSET LEN MOUNTPOINT [THREADS]
//! cargo run --release --example fuse_ceiling -- http://HOST:PORT/PATH 0 LEN MOUNTPOINT [THREADS]
//! cargo run --release --example fuse_ceiling -- splice:http://HOST:PORT/PATH 0 LEN MOUNTPOINT
//! ```
//! It runs in the foreground until unmounted (`fusermount3 -u MOUNTPOINT`).

use std::cell::RefCell;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime};

use daf_mount::fuse::mount_config;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};
use memmap2::Mmap;

mod common;

const TTL: Duration = Duration::from_secs(60);
const ROOT: u64 = 1;
const DATA: u64 = 2;

/// Where `/data`'s bytes come from.
enum Source {
    /// A byte range of a mapped file, from `start`.
    Map { map: Mmap, start: usize },
    /// The object at a URL.
    Remote(Remote),
    /// The object at a URL, its bodies spliced into the replies by the workers `jobs` go to.
    Spliced(Mutex<mpsc::Sender<Job>>),
}

/// One byte range of a file or one object at a URL, shown as `/data`.
struct Ceiling {
    source: Source,
    len: usize,
    uid: u32,
    gid: u32,
}

impl Ceiling {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, size, perm, nlink) = if ino == ROOT {
            (FileType::Directory, 0, 0o555, 2)
        } else {
            (FileType::RegularFile, self.len as u64, 0o444, 1)
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for Ceiling {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT && name == "data" {
            reply.entry(&TTL, &self.attr(DATA), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            ROOT | DATA => reply.attr(&TTL, &self.attr(ino.0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino.0 {
            DATA => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino.0 != DATA {
            return reply.error(Errno::EISDIR);
        }
        let from = usize::try_from(offset).unwrap_or(usize::MAX).min(self.len);
        let to = from.saturating_add(size as usize).min(self.len);
        match &self.source {
            Source::Map { map, start } => reply.data(&map[start + from..start + to]),
            Source::Remote(_) | Source::Spliced(_) if from == to => reply.data(&[]),
            Source::Remote(remote) => {
                BODY.with_borrow_mut(|body| match remote.get(from, to - from, body) {
                    Ok(head) => reply.data(&body[head..head + to - from]),
                    Err(e) => {
                        eprintln!("fuse_ceiling: GET {from}-{to}: {e}");
                        reply.error(Errno::EIO)
                    }
                })
            }
            Source::Spliced(jobs) => {
                let job = Job {
                    unique: req.unique().0,
                    from,
                    len: to - from,
                };
                if jobs.lock().is_ok_and(|jobs| jobs.send(job).is_ok()) {
                    // A worker answers it on the device: fuser must not (it would answer EIO
                    // when the reply is dropped unsent).
                    std::mem::forget(reply);
                } else {
                    reply.error(Errno::EIO);
                }
            }
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (DATA, FileType::RegularFile, "data"),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

thread_local! {
    /// The worker thread's keep-alive connection to the server.
    static CONNECTION: RefCell<Option<TcpStream>> = const { RefCell::new(None) };
    /// The worker thread's buffer: a response's head and body, received straight into it.
    static BODY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// An object at `http://HOST:PORT/PATH` (plain HTTP/1.1, a server that answers ranged GETs).
struct Remote {
    address: String,
    path: String,
}

impl Remote {
    fn parse(url: &str) -> Option<Remote> {
        let rest = url.strip_prefix("http://")?;
        let (address, path) = rest.split_at(rest.find('/')?);
        Some(Remote {
            address: address.to_string(),
            path: path.to_string(),
        })
    }

    /// Bytes `[from, from + len)` received into `body` (one ranged GET on this thread's
    /// connection, made again once if the server closed it); where they start in `body`.
    fn get(&self, from: usize, len: usize, body: &mut Vec<u8>) -> std::io::Result<usize> {
        match self.get_once(from, len, body) {
            Ok(head) => Ok(head),
            Err(_) => {
                CONNECTION.set(None);
                self.get_once(from, len, body)
            }
        }
    }

    /// Asks for bytes `[from, from + len)` on `connection` (connected first if it is not).
    fn ask<'a>(
        &self,
        connection: &'a mut Option<TcpStream>,
        from: usize,
        len: usize,
    ) -> std::io::Result<&'a mut TcpStream> {
        let stream = match connection {
            Some(stream) => stream,
            None => {
                let stream = TcpStream::connect(&self.address)?;
                stream.set_nodelay(true)?;
                connection.insert(stream)
            }
        };
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nRange: bytes={from}-{}\r\n\r\n",
            self.path,
            self.address,
            from + len - 1
        );
        stream.write_all(request.as_bytes())?;
        Ok(stream)
    }

    fn get_once(&self, from: usize, len: usize, body: &mut Vec<u8>) -> std::io::Result<usize> {
        CONNECTION.with_borrow_mut(|connection| {
            let stream = self.ask(connection, from, len)?;
            let mut room = len + 4096;
            if body.len() < room {
                body.resize(room, 0);
            }
            let (mut filled, mut head) = (0, None);
            while head.is_none_or(|h| filled < h + len) {
                let got = stream.read(&mut body[filled..room])?;
                if got == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                filled += got;
                if head.is_none() {
                    if let Some(end) = body[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                        if !body.starts_with(b"HTTP/1.1 206") {
                            return Err(std::io::Error::other("not a 206 answer"));
                        }
                        head = Some(end + 4);
                        room = end + 4 + len;
                        if body.len() < room {
                            body.resize(room, 0);
                        }
                    } else if filled == room {
                        return Err(std::io::Error::other("a response head over 4 KiB"));
                    }
                }
            }
            Ok(head.unwrap_or(0))
        })
    }
}

/// A read to answer: the kernel's request id and the bytes it wants.
struct Job {
    unique: u64,
    from: usize,
    len: usize,
}

/// Size of a splicing worker's pipe: a whole reply (the kernel's largest read, 1 MiB, and the
/// header) must be in it before it goes into `/dev/fuse`, one page per slot at worst.
const PIPE: i32 = 4 << 20;

/// A splicing worker: answers the jobs it takes from `jobs` on `device`.
fn splice_worker(remote: Arc<Remote>, device: Arc<OwnedFd>, jobs: Arc<Mutex<mpsc::Receiver<Job>>>) {
    let mut connection = None;
    let mut pipe = None;
    loop {
        let Some(job) = jobs.lock().ok().and_then(|jobs| jobs.recv().ok()) else {
            return;
        };
        if let Err(e) = remote.splice_reply(&mut connection, &mut pipe, &job, &device) {
            eprintln!("fuse_ceiling: GET {}+{}: {e}", job.from, job.len);
            (connection, pipe) = (None, None);
            let _ = nix::unistd::write(&*device, &out_header(&job, 0, libc::EIO));
        }
    }
}

/// A FUSE reply's header (`fuse_out_header`): the whole reply's length, the error, the request.
fn out_header(job: &Job, body: usize, error: i32) -> [u8; 16] {
    let mut header = [0; 16];
    header[..4].copy_from_slice(&(16 + body as u32).to_ne_bytes());
    header[4..8].copy_from_slice(&(-error).to_ne_bytes());
    header[8..].copy_from_slice(&job.unique.to_ne_bytes());
    header
}

impl Remote {
    /// Answers `job` on `device`: the reply's header written into the pipe, the body spliced
    /// from the socket behind it, and the pipe spliced into the device.
    fn splice_reply(
        &self,
        connection: &mut Option<TcpStream>,
        pipe: &mut Option<(OwnedFd, OwnedFd)>,
        job: &Job,
        device: &OwnedFd,
    ) -> std::io::Result<()> {
        use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
        let (out, into) = match pipe {
            Some(pipe) => pipe,
            None => {
                let made = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
                fcntl(&made.1, FcntlArg::F_SETPIPE_SZ(PIPE))?;
                pipe.insert(made)
            }
        };
        let stream = self.ask(connection, job.from, job.len)?;
        // The response's head, left out of the pipe.
        let mut head = [0u8; 4096];
        let end = loop {
            let seen = stream.peek(&mut head)?;
            if seen == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if let Some(end) = head[..seen].windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            if seen == head.len() {
                return Err(std::io::Error::other("a response head over 4 KiB"));
            }
            std::thread::yield_now();
        };
        if !head.starts_with(b"HTTP/1.1 206") {
            return Err(std::io::Error::other("not a 206 answer"));
        }
        stream.read_exact(&mut head[..end])?;
        nix::unistd::write(&*into, &out_header(job, job.len, 0))?;
        let mut left = job.len;
        while left > 0 {
            let moved = splice(
                &*stream,
                None,
                &*into,
                None,
                left,
                SpliceFFlags::SPLICE_F_MOVE,
            )?;
            if moved == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            left -= moved;
        }
        splice(
            &*out,
            None,
            device,
            None,
            16 + job.len,
            SpliceFFlags::SPLICE_F_MOVE,
        )?;
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, archive, offset, len, mountpoint, rest @ ..] = args.as_slice() else {
        return Err("usage: fuse_ceiling ARCHIVE OFFSET LEN MOUNTPOINT [THREADS]".into());
    };
    let (start, len): (usize, usize) = (offset.parse()?, len.parse()?);
    let mut spliced = None;
    let source = if let Some(url) = archive.strip_prefix("splice:") {
        let remote = Remote::parse(url).ok_or("splice:http://… only")?;
        let (jobs, taken) = mpsc::channel();
        spliced = Some((Arc::new(remote), Arc::new(Mutex::new(taken))));
        Source::Spliced(Mutex::new(jobs))
    } else if let Some(remote) = Remote::parse(archive) {
        Source::Remote(remote)
    } else {
        let map = daf_mount::sys::map_readonly(&File::open(archive)?)?;
        if start.checked_add(len).is_none_or(|end| end > map.len()) {
            return Err(format!("{start}+{len} is past the end of {archive}").into());
        }
        Source::Map { map, start }
    };
    // The splicing workers write the replies on the session's one device (no cloned devices: a
    // reply goes to the device its request was read from).
    let one = "1".to_string();
    let threads = if spliced.is_some() {
        Some(&one)
    } else {
        rest.first()
    };
    let settings = common::settings("fuse-ceiling", threads, true)?;
    let fs = Ceiling {
        source,
        len,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
    };
    let session = fuser::Session::new(fs, mountpoint, &mount_config(&settings))?;
    if let Some((remote, jobs)) = spliced {
        let device = Arc::new(std::os::fd::AsFd::as_fd(&session).try_clone_to_owned()?);
        for _ in 0..4 {
            let (remote, device, jobs) = (remote.clone(), device.clone(), jobs.clone());
            std::thread::spawn(move || splice_worker(remote, device, jobs));
        }
    }
    let session = session.spawn()?;
    common::set_readahead("fuse_ceiling", Path::new(mountpoint));
    println!("READY");
    session.join()?;
    Ok(())
}
