//! The changes `steps_tests.rs` makes beside the readers while a commit is held, and what each
//! may answer.

use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

use super::Setup;
use crate::core::{DafFs, FsError};

/// A change made while the commit is held, beside the readers' looks. `Err` only for a result
/// that is not one a caller is told of (an internal error, an I/O or content error, or "not
/// found" for a file that exists before and after).
pub(super) struct Change {
    pub(super) name: &'static str,
    /// Whether it may change the item (its bytes are then not checked after a remount).
    pub(super) touches_item: bool,
    /// Whether what it changes may not be there yet ("not found" is then an answer).
    pub(super) may_be_absent: bool,
    /// Made before the commit starts (e.g. a handle opened): what `run` gets.
    pub(super) prepare: fn(&Setup) -> Option<u64>,
    pub(super) run: fn(&DafFs, &Ctx, Option<u64>) -> Result<(), FsError>,
}

/// What a change needs to know of its setup.
#[derive(Clone)]
pub(super) struct Ctx {
    pub(super) name: String,
    /// The first file written (mount path).
    pub(super) item_file: String,
}

impl Ctx {
    fn parent_and_name(&self, path: &str, fs: &DafFs) -> Result<(u64, String), FsError> {
        let (dir, name) = path.rsplit_once('/').unwrap();
        Ok((fs.resolve(dir)?, name.to_string()))
    }
}

fn nothing(_: &Setup) -> Option<u64> {
    None
}

/// Closes `fh` as its opener would.
pub(super) fn close(fs: &DafFs, fh: u64) -> Result<(), FsError> {
    let closed = fs.flush(fh, None);
    fs.release(fh);
    closed
}

pub(super) const CHANGES: &[Change] = &[
    Change {
        name: "open the item's file for writing",
        touches_item: true,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| close(fs, fs.open(fs.resolve(&ctx.item_file)?, true, false)?),
    },
    Change {
        name: "open the item's file truncating, and write",
        touches_item: true,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let fh = fs.open(fs.resolve(&ctx.item_file)?, true, true)?;
            let written = fs.write(fh, 0, b"{}").map(drop);
            close(fs, fh).and(written)
        },
    },
    Change {
        name: "truncate the item's file",
        touches_item: true,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            fs.setattr(fs.resolve(&ctx.item_file)?, Some(0), None)
                .map(drop)
        },
    },
    Change {
        name: "set the item's file's time",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let time = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 30));
            fs.setattr(fs.resolve(&ctx.item_file)?, None, time)
                .map(drop)
        },
    },
    Change {
        name: "write through a handle opened before the commit",
        touches_item: true,
        may_be_absent: false,
        prepare: |setup| {
            let ino = setup.fs.resolve(&setup.written[0].0).unwrap();
            Some(setup.fs.open(ino, true, false).unwrap())
        },
        run: |fs, _, fh| {
            let fh = fh.unwrap();
            let written = fs.write(fh, 0, b"{").map(drop);
            close(fs, fh).and(written)
        },
    },
    Change {
        name: "create a new file beside the item's",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let (dir, _) = ctx.parent_and_name(&ctx.item_file, fs)?;
            let (_, fh) = fs.create(dir, OsStr::new("new.json"), false)?;
            let written = fs.write(fh, 0, b"{\"format\":\"dense\"}").map(drop);
            close(fs, fh).and(written)
        },
    },
    Change {
        name: "create over the item's file",
        touches_item: true,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let (dir, name) = ctx.parent_and_name(&ctx.item_file, fs)?;
            let (_, fh) = fs.create(dir, OsStr::new(&name), false)?;
            close(fs, fh)
        },
    },
    Change {
        name: "make a directory in the Zarr view",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let dir = fs.resolve(&format!("{}.daf.zarr/vectors/cell", ctx.name))?;
            fs.mkdir(dir, OsStr::new("made")).map(drop)
        },
    },
    Change {
        name: "unlink the item's file",
        touches_item: true,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let (dir, name) = ctx.parent_and_name(&ctx.item_file, fs)?;
            fs.unlink(dir, OsStr::new(&name))
        },
    },
    Change {
        name: "unlink a committed sibling's file",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let dir = fs.resolve(&format!("{}.daf/vectors/cell", ctx.name))?;
            fs.unlink(dir, OsStr::new("score.json"))
        },
    },
    Change {
        name: "rename the item's file",
        touches_item: true,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let (dir, name) = ctx.parent_and_name(&ctx.item_file, fs)?;
            fs.rename(dir, OsStr::new(&name), dir, OsStr::new("moved.json"))
        },
    },
    Change {
        name: "rename a staged sibling",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let dir = fs.resolve(&format!("{}.daf/vectors/cell", ctx.name))?;
            fs.rename(
                dir,
                OsStr::new("other.json"),
                dir,
                OsStr::new("other2.json"),
            )
        },
    },
    Change {
        name: "link the item's file",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let (dir, _) = ctx.parent_and_name(&ctx.item_file, fs)?;
            let ino = fs.resolve(&ctx.item_file)?;
            fs.link(ino, dir, OsStr::new("linked.json")).map(drop)
        },
    },
    Change {
        name: "remove the item's Zarr directory",
        touches_item: true,
        // Written through the FilesDaf view, the item has no Zarr directory before its commit.
        may_be_absent: true,
        prepare: nothing,
        run: |fs, ctx, _| {
            let dir = fs.resolve(&format!("{}.daf.zarr/vectors/cell", ctx.name))?;
            fs.rmdir(dir, OsStr::new("fresh"))
        },
    },
    Change {
        name: "fsync the item's file",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, ctx, _| {
            let ino = fs.resolve(&ctx.item_file)?;
            let fh = fs.open(ino, false, false)?;
            let synced = fs.fsync(ino, fh);
            close(fs, fh).and(synced)
        },
    },
    Change {
        name: "fsync the mount (every staged item finalized)",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, _, _| fs.finalize("").map(drop),
    },
    Change {
        name: "statfs",
        touches_item: false,
        may_be_absent: false,
        prepare: nothing,
        run: |fs, _, _| {
            assert!(fs.stats().inodes > 0);
            Ok(())
        },
    },
];

/// Whether `result` is one a caller is told of for a path that exists before and after.
pub(super) fn documented(result: &Result<(), FsError>) -> bool {
    match result {
        Ok(()) => true,
        Err(e) => matches!(
            e,
            FsError::NotDir
                | FsError::IsDir
                | FsError::Exists
                | FsError::NotEmpty
                | FsError::ReadOnly
                | FsError::Invalid(_)
                | FsError::NotPermitted(_)
        ),
    }
}
