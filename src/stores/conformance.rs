//! The conformance suite of [`Store`]: what every store must do, checked the same way for each.
//!
//! [`check_store`] takes a factory that makes a store holding given files (a temporary directory,
//! a temporary archive, a local HTTP server…) and checks listing, sizes, ranges (start, middle,
//! end, empty, past the end), mtimes, maps, missing keys, names with `/`, the index the readers
//! read, and reads from several threads at once. It runs here for the directory and ZIP stores,
//! and for a store indexed by ranges ([`index_by_ranges`]); another store calls it from its own
//! tests.

use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::dir::{self, SMALL_FILE};
use super::store::{index_by_ranges, Store};
use super::zip;
use super::{Bytes, StoreError, StoreIndex};
use crate::stores::zip::append::append;

/// Byte `i` of a pattern that no range of another offset repeats soon.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + usize::from(seed)) % 251) as u8)
        .collect()
}

/// The files every store is checked with: documents, an empty file, one larger than a small
/// file (mapped by a directory store), nested names, a name with a space and a non-ASCII letter.
fn sample() -> Vec<(String, Vec<u8>)> {
    vec![
        ("daf.json".into(), br#"{"version":[1,0]}"#.to_vec()),
        ("empty".into(), Vec::new()),
        ("big.data".into(), pattern(SMALL_FILE as usize + 4099, 1)),
        ("dir/sub/x.data".into(), pattern(1000, 2)),
        ("dir/y".into(), b"hello".to_vec()),
        ("dir/z é.txt".into(), b"accent".to_vec()),
        ("dirt".into(), b"not under dir".to_vec()),
        ("a/b/c/d/e/f".into(), pattern(33, 3)),
    ]
}

fn is_missing(result: Result<impl std::fmt::Debug, StoreError>) -> bool {
    matches!(result, Err(StoreError::Missing { .. }))
}

/// Checks that a store made by `make` (from the files given, name and content) keeps the
/// [`Store`] contract. Panics, naming the store and the check, on the first failure. The files
/// must be new when `make` returns (their mtimes are checked to be within 2 s of then); a store
/// that learns its keys from elsewhere than a listing (a remote one) may be told them by `make`.
pub(crate) fn check_store(make: impl Fn(&[(&str, &[u8])]) -> Box<dyn Store>) {
    let files = sample();
    let given: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let before = SystemTime::now() - Duration::from_secs(2);
    let store = make(&given);
    let after = SystemTime::now() + Duration::from_secs(2);
    let what = store.describe();
    assert!(!what.is_empty());
    check_list(store.as_ref(), &files);
    for (key, content) in &files {
        check_key(store.as_ref(), key, content, before, after);
    }
    check_missing(store.as_ref());
    check_index(&store.index().unwrap(), store.as_ref(), &files);
    check_threads(store.as_ref(), &files);
    let empty = make(&[]);
    assert!(empty.list("").unwrap().is_empty(), "{what}: empty store");
    assert!(is_missing(empty.size("daf.json")));
    assert!(empty.index().unwrap().is_empty());
}

fn check_list(store: &dyn Store, files: &[(String, Vec<u8>)]) {
    let what = store.describe();
    let mut keys: Vec<String> = files.iter().map(|(k, _)| k.clone()).collect();
    keys.sort();
    assert_eq!(store.list("").unwrap(), keys, "{what}: list of all keys");
    assert_eq!(
        store.list("dir").unwrap(),
        vec!["dir/sub/x.data", "dir/y", "dir/z é.txt"],
        "{what}: list under a directory (not `dirt`)"
    );
    assert_eq!(store.list("dir/sub").unwrap(), vec!["dir/sub/x.data"]);
    assert_eq!(store.list("dir/sub/").unwrap(), vec!["dir/sub/x.data"]);
    assert_eq!(store.list("a/b/c").unwrap(), vec!["a/b/c/d/e/f"]);
    for nothing in ["di", "nope", "daf.json", "dir/sub/x"] {
        assert!(
            store.list(nothing).unwrap().is_empty(),
            "{what}: list({nothing:?}) holds nothing"
        );
    }
}

fn check_key(store: &dyn Store, key: &str, content: &[u8], before: SystemTime, after: SystemTime) {
    let what = format!("{}: {key}", store.describe());
    let size = content.len() as u64;
    assert_eq!(store.size(key).unwrap(), size, "{what}: size");
    let mtime = store.mtime(key).unwrap();
    assert!(
        // ZIP times may be truncated to whole seconds.
        mtime >= before && mtime <= after,
        "{what}: mtime {mtime:?} not when the file was made"
    );
    let read = |offset: u64, len: u64| store.read_range(key, offset, len);
    let expect = |offset: u64, len: u64| {
        let got = read(offset, len).unwrap_or_else(|e| panic!("{what}: {offset}+{len}: {e}"));
        let (start, end) = (offset as usize, (offset + len) as usize);
        assert_eq!(
            got.as_slice(),
            &content[start..end],
            "{what}: {offset}+{len}"
        );
    };
    expect(0, size);
    expect(0, 0);
    expect(size, 0);
    if size >= 10 {
        expect(0, 10);
        expect(size / 2 - 3, 7);
        expect(size - 10, 10);
        expect(1, size - 2);
    }
    for (offset, len) in [
        (0, size + 1),
        (size, 1),
        (size + 1, 0),
        (size.saturating_sub(1), 2),
        (u64::MAX, 1),
        (1, u64::MAX),
    ] {
        match read(offset, len) {
            Err(StoreError::Range { .. }) => {}
            other => panic!("{what}: {offset}+{len} past the end gave {other:?}"),
        }
    }
    if let Some(whole) = store.map(key).unwrap() {
        assert_eq!(whole.as_slice(), content, "{what}: map");
        assert_eq!(whole.as_slice(), read(0, size).unwrap().as_slice());
    }
}

fn check_missing(store: &dyn Store) {
    let what = store.describe();
    for key in [
        "nope",
        "dir",
        "dir/",
        "dir/sub",
        "/daf.json",
        "daf.json/x",
        "",
    ] {
        assert!(is_missing(store.size(key)), "{what}: size of {key:?}");
        assert!(is_missing(store.mtime(key)), "{what}: mtime of {key:?}");
        assert!(is_missing(store.read_range(key, 0, 0)), "{what}: {key:?}");
        assert!(is_missing(store.map(key)), "{what}: map of {key:?}");
    }
}

/// The index holds the same keys, sizes known without reading, bytes and mtimes.
fn check_index(index: &StoreIndex, store: &dyn Store, files: &[(String, Vec<u8>)]) {
    let what = store.describe();
    assert_eq!(
        index.keys().collect::<Vec<_>>(),
        store.list("").unwrap(),
        "{what}: index keys"
    );
    for (key, content) in files {
        let entry = index.get(key).unwrap();
        assert_eq!(
            entry.blob.known_len(),
            Some(content.len() as u64),
            "{what}: {key}"
        );
        assert_eq!(entry.mtime, store.mtime(key).unwrap(), "{what}: {key}");
        let middle = entry.blob.read_range(1, 5).unwrap();
        let end = content.len().min(6);
        assert_eq!(
            middle.as_slice(),
            &content[end.min(1)..end],
            "{what}: {key}"
        );
        assert_eq!(entry.blob.bytes().unwrap().as_slice(), content.as_slice());
    }
}

/// Four threads read ranges of every key at once through one `&dyn Store`.
fn check_threads(store: &dyn Store, files: &[(String, Vec<u8>)]) {
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            scope.spawn(move || {
                for (key, content) in files {
                    let size = content.len() as u64;
                    let offset = (t * 3).min(size);
                    let len = (size - offset).min(17);
                    let got = store.read_range(key, offset, len).unwrap();
                    let start = offset as usize;
                    assert_eq!(got.as_slice(), &content[start..start + len as usize]);
                }
            });
        }
    });
}

/// Checks that a local store maps every key of the sample (the ZIP and directory stores).
fn check_maps(store: &dyn Store) {
    for (key, content) in sample() {
        let map = store.map(&key).unwrap();
        assert_eq!(map.map(|b| b.as_slice().to_vec()), Some(content), "{key}");
    }
}

/// A factory of stores in fresh sub-directories of `root`, made by `open` from `root/N`.
fn numbered<'a>(root: &'a Path, counter: &'a Cell<usize>) -> impl Fn() -> std::path::PathBuf + 'a {
    move || {
        counter.set(counter.get() + 1);
        root.join(counter.get().to_string())
    }
}

fn write_dir(dir: &Path, files: &[(&str, &[u8])]) {
    std::fs::create_dir_all(dir).unwrap();
    for (key, content) in files {
        let path = dir.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

/// An archive holding `files` as stored members, written by the append path.
pub(crate) fn write_zip(path: &Path, files: &[(&str, &[u8])]) {
    // An empty archive is its end record alone.
    let mut eocd = 0x0605_4b50u32.to_le_bytes().to_vec();
    eocd.extend([0; 18]);
    std::fs::write(path, eocd).unwrap();
    let entries: Vec<(String, Bytes)> = files
        .iter()
        .map(|(k, v)| (k.to_string(), Bytes::from_vec(v.to_vec())))
        .collect();
    if !entries.is_empty() {
        append(path, &entries).unwrap();
    }
}

#[test]
fn the_directory_store_conforms() {
    let tmp = tempfile::tempdir().unwrap();
    let counter = Cell::new(0);
    let next = numbered(tmp.path(), &counter);
    check_store(|files| {
        let dir = next();
        write_dir(&dir, files);
        Box::new(dir::open_store(&dir).unwrap())
    });
    let dir = next();
    let files = sample();
    let given: Vec<(&str, &[u8])> = files.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
    write_dir(&dir, &given);
    let store = dir::open_store(&dir).unwrap();
    check_maps(&store);
    assert!(store.map("big.data").unwrap().unwrap().is_mapped());
}

#[test]
fn the_zip_store_conforms() {
    let tmp = tempfile::tempdir().unwrap();
    let counter = Cell::new(0);
    let next = numbered(tmp.path(), &counter);
    check_store(|files| {
        let path = next().with_extension("zip");
        write_zip(&path, files);
        Box::new(zip::open_store(&path).unwrap())
    });
    let path = next().with_extension("zip");
    let files = sample();
    let given: Vec<(&str, &[u8])> = files.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
    write_zip(&path, &given);
    let store = zip::open_store(&path).unwrap();
    check_maps(&store);
    // Stored members are ranges of the archive's map, not copies.
    for (key, _) in files {
        assert!(store.map(&key).unwrap().unwrap().is_mapped() || key == "empty");
    }
}

#[test]
fn a_group_of_a_zip_store_conforms() {
    let tmp = tempfile::tempdir().unwrap();
    let counter = Cell::new(0);
    let next = numbered(tmp.path(), &counter);
    check_store(|files| {
        let path = next().with_extension("zip");
        let mut all: Vec<(String, &[u8])> = vec![("g10/daf.json".into(), b"{}")];
        all.extend(files.iter().map(|(k, v)| (format!("g1/{k}"), *v)));
        all.push(("outside".into(), b"x"));
        let given: Vec<(&str, &[u8])> = all.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        write_zip(&path, &given);
        Box::new(zip::open_store(&path).unwrap().group("g1"))
    });
}

/// An archive holding `files` as deflated members, written by Python's `zipfile`.
fn write_deflated_zip(path: &Path, files: &[(&str, &[u8])]) {
    let dir = path.with_extension("files");
    write_dir(&dir, files);
    // DOS times are local times; the reader takes them as UTC.
    let status = std::process::Command::new("python3")
        .env("TZ", "UTC")
        .arg("-c")
        .arg(
            "import zipfile,sys\n\
             z=zipfile.ZipFile(sys.argv[1],'w',zipfile.ZIP_DEFLATED)\n\
             for k in sys.argv[3:]: z.write(sys.argv[2]+'/'+k, k)\n\
             z.close()",
        )
        .arg(path)
        .arg(&dir)
        .args(files.iter().map(|(k, _)| k))
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_zip_store_of_deflated_members_conforms() {
    let tmp = tempfile::tempdir().unwrap();
    let counter = Cell::new(0);
    let next = numbered(tmp.path(), &counter);
    check_store(|files| {
        let path = next().with_extension("zip");
        write_deflated_zip(&path, files);
        Box::new(zip::open_store(&path).unwrap())
    });
    let path = next().with_extension("zip");
    write_deflated_zip(&path, &[("k", &[7; 5000])]);
    let store = zip::open_store(&path).unwrap();
    let map = store.map("k").unwrap().unwrap();
    assert!(!map.is_mapped() && map.as_slice() == [7; 5000]);
}

/// A stored member whose bytes no longer match its CRC-32 is an error through the store (its
/// lazy check runs on first access), never its bytes.
#[test]
fn a_damaged_zip_member_is_an_error_through_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.zip");
    write_zip(&path, &[("good", b"good bytes"), ("bad", b"bad  bytes")]);
    let mut data = std::fs::read(&path).unwrap();
    let at = data.windows(10).position(|w| w == b"bad  bytes").unwrap();
    data[at + 3] = b'!';
    std::fs::write(&path, data).unwrap();
    let store = zip::open_store(&path).unwrap();
    assert_eq!(store.read_range("good", 0, 4).unwrap().as_slice(), b"good");
    assert_eq!(store.size("bad").unwrap(), 10);
    assert!(store.read_range("bad", 0, 3).is_err());
    assert!(store.map("bad").is_err());
}

/// A store whose index reads through its `read_range` (as a remote store's may).
#[derive(Debug)]
struct ByRanges(Arc<dyn Store>);

impl Store for ByRanges {
    fn describe(&self) -> String {
        format!("ranges of {}", self.0.describe())
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.0.list(prefix)
    }
    fn size(&self, key: &str) -> Result<u64, StoreError> {
        self.0.size(key)
    }
    fn mtime(&self, key: &str) -> Result<SystemTime, StoreError> {
        self.0.mtime(key)
    }
    fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.0.read_range(key, offset, len)
    }
    fn index(&self) -> Result<StoreIndex, StoreError> {
        index_by_ranges(self.0.clone())
    }
}

#[test]
fn a_store_indexed_by_ranges_conforms_and_maps_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let counter = Cell::new(0);
    let next = numbered(tmp.path(), &counter);
    check_store(|files| {
        let dir = next();
        write_dir(&dir, files);
        Box::new(ByRanges(Arc::new(dir::open_store(&dir).unwrap())))
    });
    let dir = next();
    write_dir(&dir, &[("k", b"v")]);
    let store = ByRanges(Arc::new(dir::open_store(&dir).unwrap()));
    assert!(store.map("k").unwrap().is_none());
    assert!(is_missing(store.map("nope")));
    let index = store.index().unwrap();
    assert!(index.get("k").unwrap().blob.is_ranged());
}
