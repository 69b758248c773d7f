//! The file system under test in `model.rs`: a `DafFs` over a copy of a fixture, driven by the
//! operations of the model, and what it shows.

use super::*;

/// The file system under test and the handles it gave.
pub(super) struct Subject {
    pub(super) fs: DafFs,
    files: String,
    zarr: String,
    handles: Vec<u64>,
    /// Names listed at start in the directories the paths are in.
    initial: BTreeMap<&'static str, BTreeSet<String>>,
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// Directories whose listings are compared.
const LISTED: [&str; 4] = [
    "files/scalars",
    "files/vectors/cell",
    "zarr/scalars",
    "zarr",
];

impl Subject {
    pub(super) fn open(source: &Path, base: &str) -> Subject {
        let opened = open_source(source.to_str().unwrap()).unwrap();
        let staging = StagingArea::for_source(&opened.path);
        let fs = DafFs::with_staging(
            opened.datasets,
            ViewSelection::Both,
            SystemTime::UNIX_EPOCH,
            Some(staging),
        );
        fs.recover();
        let mut subject = Subject {
            fs,
            files: format!("{base}.daf"),
            zarr: format!("{base}.daf.zarr"),
            handles: Vec::new(),
            initial: BTreeMap::new(),
        };
        for dir in LISTED {
            let names = subject.listing(dir).unwrap();
            subject.initial.insert(dir, names);
        }
        subject
    }

    /// The mount path of a path of the alphabet.
    fn mount(&self, path: &str) -> String {
        match path.split_once('/') {
            Some(("files", rel)) => format!("{}/{rel}", self.files),
            Some(("zarr", rel)) => format!("{}/{rel}", self.zarr),
            _ if path == "zarr" => self.zarr.clone(),
            _ => panic!("{path}"),
        }
    }

    fn ino(&self, path: &str) -> Result<u64, FsError> {
        self.fs.resolve(&self.mount(path))
    }

    fn parent_and_name(&self, path: &str) -> Result<(u64, String), Err> {
        let (dir, name) = split(path);
        let parent = self.ino(dir).map_err(|e| kind(&e))?;
        Ok((parent, name.to_string()))
    }

    fn listing(&self, dir: &str) -> Option<BTreeSet<String>> {
        let ino = self.ino(dir).ok()?;
        Some(
            self.fs
                .readdir(ino, 2, usize::MAX)
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect(),
        )
    }

    pub(super) fn apply(&mut self, op: &Op) -> Result<(), Err> {
        let handle = |h: &usize, handles: &Vec<u64>| handles[h % handles.len()];
        match op {
            Op::Create(p) => {
                let (parent, name) = self.parent_and_name(PATHS[*p])?;
                let (_, fh) = self
                    .fs
                    .create(parent, OsStr::new(&name), false)
                    .map_err(|e| kind(&e))?;
                self.handles.push(fh);
                Ok(())
            }
            Op::Write(h, c) => {
                let fh = handle(h, &self.handles);
                self.fs
                    .write(fh, 0, CONTENTS[*c])
                    .map(|_| ())
                    .map_err(|e| kind(&e))
            }
            Op::Close(h) => {
                let i = h % self.handles.len();
                let fh = self.handles.remove(i);
                let result = self.fs.flush(fh, None).map_err(|e| kind(&e));
                self.fs.release(fh);
                result
            }
            Op::Fsync(h) => {
                let fh = handle(h, &self.handles);
                let ino = self.fs.handle_ino(fh).unwrap();
                self.fs.fsync(ino, fh).map_err(|e| kind(&e))
            }
            Op::FsyncRoot => self.fs.finalize("").map_err(|e| kind(&e)),
            Op::Rename(from, to) => {
                let (p1, n1) = self.parent_and_name(PATHS[*from])?;
                let (p2, n2) = self.parent_and_name(PATHS[*to])?;
                self.fs
                    .rename(p1, OsStr::new(&n1), p2, OsStr::new(&n2))
                    .map_err(|e| kind(&e))
            }
            Op::Unlink(p) => {
                let (parent, name) = self.parent_and_name(PATHS[*p])?;
                self.fs
                    .unlink(parent, OsStr::new(&name))
                    .map_err(|e| kind(&e))
            }
            Op::Mkdir => {
                let (parent, name) = self.parent_and_name(ZDIR)?;
                self.fs
                    .mkdir(parent, OsStr::new(&name))
                    .map(|_| ())
                    .map_err(|e| kind(&e))
            }
        }
    }

    pub(super) fn shown(&self, path: &str, step: &str) -> Result<Option<Vec<u8>>, TestCaseError> {
        let Ok(ino) = self.ino(path) else {
            return Ok(None);
        };
        let bytes = self.fs.content(ino).unwrap().as_slice().to_vec();
        let size = self.fs.getattr(ino).unwrap().size;
        prop_assert_eq!(size, bytes.len() as u64, "{}: {}: st_size", step, path);
        Ok(Some(bytes))
    }

    /// Compares every observable of the alphabet with the model.
    pub(super) fn check(&self, model: &Model, step: &str) -> Result<(), TestCaseError> {
        let texts = |b: Option<&Vec<u8>>| b.map(|b| String::from_utf8_lossy(b).into_owned());
        for path in PATHS {
            let shown = self.shown(path, step)?;
            let expected = model.file(path);
            let same = match (&shown, expected) {
                // Committed documents are the views' own serialisation: equal as JSON.
                (Some(a), Some(b)) if !model.staged.contains_key(path) && json(b).is_some() => {
                    json(a) == json(b)
                }
                (a, b) => a.as_ref() == b,
            };
            prop_assert!(
                same,
                "{}: {}: shown {:?}, model {:?}",
                step,
                path,
                texts(shown.as_ref()),
                texts(expected)
            );
        }
        // Each view shows the items committed through the other.
        for (item, node) in [
            (Item::A, "zarr/scalars/a"),
            (Item::B, "zarr/scalars/b"),
            (Item::V, "zarr/vectors/cell/v"),
            (Item::Z, "files/scalars/z.json"),
        ] {
            let target = if node.starts_with("zarr/") {
                format!("{node}/.zarray")
            } else {
                node.to_string()
            };
            let shown = self.ino(&target).is_ok();
            prop_assert_eq!(shown, model.committed_item(item), "{}: {}", step, node);
        }
        if let Some(data) = model.committed.get("files/vectors/cell/v.data") {
            let chunk = self.shown("zarr/vectors/cell/v/0", step)?;
            prop_assert_eq!(chunk.as_ref(), Some(data), "{}: Zarr chunk", step);
        }
        if let Some(chunk) = model.committed.get("zarr/scalars/z/0") {
            let value = f64::from_le_bytes(chunk.as_slice().try_into().unwrap());
            let shown = self
                .shown("files/scalars/z.json", step)?
                .and_then(|b| json(&b));
            let expected = serde_json::json!({"value": value, "type": "Float64"});
            prop_assert_eq!(shown, Some(expected), "{}: z.json", step);
        }
        // Listings: what was there, plus what is staged or committed.
        for (dir, initial) in &self.initial {
            let mut expected = initial.clone();
            for path in model.staged.keys().chain(model.committed.keys()) {
                if let Some(rest) = path.strip_prefix(&format!("{dir}/")) {
                    expected.insert(rest.split('/').next().unwrap_or(rest).to_string());
                }
            }
            let committed_nodes = [
                ("zarr/scalars", Item::A, "a"),
                ("zarr/scalars", Item::B, "b"),
                ("files/scalars", Item::Z, "z.json"),
            ];
            for (d, item, name) in committed_nodes {
                if d == *dir && model.committed_item(item) {
                    expected.insert(name.to_string());
                }
            }
            if *dir == "zarr/scalars" && model.zdir_exists() {
                expected.insert("z".to_string());
            }
            let listed = self.listing(dir);
            prop_assert_eq!(
                listed.as_ref(),
                Some(&expected),
                "{}: listing of {}",
                step,
                dir
            );
        }
        Ok(())
    }
}
