use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::*;
use crate::formats::strings::encode_vlen;

fn f64_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn strings(values: &[&str]) -> Content {
    let vlen = encode_vlen(values.iter().map(|s| s.as_bytes()), values.len());
    Content::Strings {
        vlen: Blob::ready(Bytes::from_vec(vlen)),
        count: values.len() as u64,
    }
}

/// A ranged source of `len` bytes (byte `i` is `i * 7 % 251`) that counts the bytes asked of it
/// and refuses reads larger than `max_read`.
struct Counting {
    asked: AtomicU64,
    max_read: u64,
}

impl RangeSource for Counting {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        assert!(len <= self.max_read, "a read of {len} bytes");
        self.asked.fetch_add(len, Ordering::Relaxed);
        Ok(Bytes::from_vec(
            (offset..offset + len)
                .map(|i| (i * 7 % 251) as u8)
                .collect(),
        ))
    }
}

/// A plan with one dataset of every kind, and a ranged one of `ranged` bytes over `counting`.
fn every_kind(counting: &Arc<Counting>, ranged: u64) -> Plan {
    let mut plan = Plan::new((1, 8));
    plan.root_attrs.push(Attr {
        name: "encoding-type".into(),
        value: AttrValue::Str("anndata".into()),
    });
    plan.dataset(
        "daf",
        Element::Num(NumType::UInt8),
        vec![2],
        Content::values(vec![1, 0]),
    );
    plan.group("g")
        .attr(
            "column-order",
            AttrValue::Strs(vec!["a".into(), "b".into()]),
        )
        .attr("shape", AttrValue::Ints(vec![3, 2]))
        .attr("empty", AttrValue::Floats(vec![]))
        .attr("n", AttrValue::Int(-5))
        .attr("x", AttrValue::Float(2.5))
        .attr("flag", AttrValue::Bool(true));
    plan.dataset(
        "g/score",
        Element::Num(NumType::Float64),
        vec![3],
        Content::values(f64_bytes(&[1.5, -2.0, 1e300])),
    );
    plan.dataset(
        "g/matrix",
        Element::Num(NumType::Float64),
        vec![2, 3],
        Content::values(f64_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])),
    );
    plan.dataset(
        "g/bits",
        Element::Num(NumType::Bool),
        vec![3],
        Content::values(vec![1, 0, 1]),
    );
    plan.dataset(
        "g/bools",
        Element::BoolEnum,
        vec![2],
        Content::values(vec![0, 1]),
    );
    plan.dataset(
        "title",
        Element::FixedUtf8(5),
        vec![],
        Content::values(b"hello".to_vec()),
    );
    plan.dataset(
        "g/names",
        Element::VlenUtf8,
        vec![3],
        strings(&["c1", "", "ünï\tcode"]),
    );
    plan.dataset(
        "g/table",
        Element::VlenUtf8,
        vec![2, 2],
        strings(&["a", "b", "c", "d"]),
    );
    plan.dataset(
        "g/none",
        Element::Num(NumType::Int32),
        vec![0],
        Content::Empty,
    );
    plan.dataset("g/nothing", Element::VlenUtf8, vec![4, 0], strings(&[]));
    plan.dataset(
        "ranged",
        Element::Num(NumType::UInt8),
        vec![ranged],
        Content::Bytes(Blob::ranged(ranged, counting.clone())),
    );
    plan
}

fn counting(max_read: u64) -> Arc<Counting> {
    Arc::new(Counting {
        asked: AtomicU64::new(0),
        max_read,
    })
}

/// The whole file, read by ranges of `step` bytes.
fn whole(file: &Hdf5File, step: u64) -> Vec<u8> {
    let total = file.size().unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < total {
        let len = step.min(total - at);
        out.extend_from_slice(file.read_range(at, len).unwrap().as_slice());
        at += len;
    }
    out
}

/// Opens `image` with libhdf5.
fn open(image: &[u8]) -> (tempfile::TempDir, hdf5_metno::File) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.h5");
    std::fs::write(&path, image).unwrap();
    let file = hdf5_metno::File::open(&path).unwrap();
    (dir, file)
}

#[test]
fn libhdf5_reads_every_kind_of_dataset_and_attribute_back() {
    use hdf5_metno::types::VarLenUnicode;
    let source = counting(u64::MAX);
    let file = Hdf5File::new("test.h5", every_kind(&source, 1000));
    let image = whole(&file, 4096);
    assert_eq!(&image[..8], b"\x89HDF\r\n\x1a\n");
    let (_dir, h5) = open(&image);
    let root_attr: VarLenUnicode = h5.attr("encoding-type").unwrap().read_scalar().unwrap();
    assert_eq!(root_attr.as_str(), "anndata");
    assert_eq!(h5.dataset("daf").unwrap().read_raw::<u8>().unwrap(), [1, 0]);
    let g = h5.group("g").unwrap();
    let order: Vec<VarLenUnicode> = g.attr("column-order").unwrap().read_raw().unwrap();
    assert_eq!(
        order.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(g.attr("shape").unwrap().read_raw::<i64>().unwrap(), [3, 2]);
    assert_eq!(
        g.attr("empty").unwrap().read_raw::<f64>().unwrap(),
        Vec::<f64>::new()
    );
    assert_eq!(g.attr("n").unwrap().read_scalar::<i64>().unwrap(), -5);
    assert_eq!(g.attr("x").unwrap().read_scalar::<f64>().unwrap(), 2.5);
    assert!(g.attr("flag").unwrap().read_scalar::<bool>().unwrap());
    let score = g.dataset("score").unwrap();
    assert_eq!(score.read_raw::<f64>().unwrap(), [1.5, -2.0, 1e300]);
    assert_eq!(score.offset().unwrap() % 8, 0);
    let matrix = g.dataset("matrix").unwrap();
    assert_eq!(matrix.shape(), [2, 3]);
    assert_eq!(
        matrix.read_raw::<f64>().unwrap(),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    let bits = g.dataset("bits").unwrap();
    assert!(crate::sys::hdf5_is_bitfield(&bits.dtype().unwrap()));
    let at = bits.offset().unwrap() as usize;
    assert_eq!(&image[at..at + 3], [1, 0, 1]);
    assert_eq!(
        g.dataset("bools").unwrap().read_raw::<bool>().unwrap(),
        [false, true]
    );
    let title = h5.dataset("title").unwrap();
    assert_eq!(title.shape(), Vec::<usize>::new());
    assert!(!crate::sys::hdf5_is_spacepad(&title.dtype().unwrap()));
    let at = title.offset().unwrap() as usize;
    assert_eq!(&image[at..at + 5], b"hello");
    let names: Vec<VarLenUnicode> = g.dataset("names").unwrap().read_raw().unwrap();
    assert_eq!(
        names.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        ["c1", "", "ünï\tcode"]
    );
    let table = g.dataset("table").unwrap();
    assert_eq!(table.shape(), [2, 2]);
    let cells: Vec<VarLenUnicode> = table.read_raw().unwrap();
    assert_eq!(
        cells.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c", "d"]
    );
    for empty in ["none", "nothing"] {
        let ds = g.dataset(empty).unwrap();
        assert_eq!((ds.offset(), ds.storage_size()), (None, 0), "{empty}");
        assert!(!ds.is_chunked(), "{empty}");
    }
    let ranged = h5.dataset("ranged").unwrap();
    let expected: Vec<u8> = (0..1000u64).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(ranged.read_raw::<u8>().unwrap(), expected);
}

#[test]
fn a_read_gives_the_same_bytes_at_every_segment_boundary() {
    let source = counting(u64::MAX);
    let file = Hdf5File::new("test.h5", every_kind(&source, 5000));
    let reference = whole(&file, u64::MAX);
    let built = file.built().unwrap();
    assert_eq!(built.total, reference.len() as u64);
    assert!(built.segments.windows(2).all(|w| w[0].start < w[1].start));
    assert_eq!(built.segments[0].start, 0);
    // Every dataset served from a blob is one segment, its bytes the blob's.
    assert_eq!(built.contents.len(), 7);
    for s in &built.segments {
        if let Some(i) = s.content {
            let blob = &built.contents[i as usize];
            let len = blob.len().unwrap();
            let at = s.start as usize;
            assert_eq!(
                &reference[at..at + len as usize],
                blob.bytes().unwrap().as_slice()
            );
            assert_eq!(s.start % 8, 0);
        }
    }
    let total = reference.len() as u64;
    for s in &built.segments {
        for delta in [-9i64, -8, -1, 0, 1, 7, 8] {
            let Some(at) = s.start.checked_add_signed(delta).filter(|&a| a < total) else {
                continue;
            };
            for len in [1, 2, 9, 17, 100, 6000] {
                let got = file.read_range(at, len).unwrap();
                let end = (at + len).min(total) as usize;
                assert_eq!(got.as_slice(), &reference[at as usize..end], "{at}+{len}");
            }
        }
    }
    // Reads by other steps give the same file.
    assert_eq!(whole(&file, 1), reference);
    assert_eq!(whole(&file, 333), reference);
}

#[test]
fn a_ranged_content_is_asked_only_for_what_is_read() {
    // A 64 MiB dataset whose source refuses reads over 1 MiB: building the file and reading its
    // metadata asks nothing of it, a read inside it only that range.
    let source = counting(1 << 20);
    let len = 64u64 << 20;
    let file = Hdf5File::new("test.h5", every_kind(&source, len));
    let total = file.size().unwrap();
    assert!(total > len);
    assert_eq!(source.asked.load(Ordering::Relaxed), 0);
    let built = file.built().unwrap();
    let ranged = built
        .segments
        .iter()
        .find(|s| {
            s.content
                .is_some_and(|i| built.contents[i as usize].len().unwrap() == len)
        })
        .unwrap()
        .start;
    let got = file.read_range(ranged + 1000, 4096).unwrap();
    assert_eq!(got.as_slice()[0], (1000 * 7 % 251) as u8);
    assert_eq!(source.asked.load(Ordering::Relaxed), 4096);
}

fn build_error(plan: Plan) -> String {
    let file = Hdf5File::new("bad.h5", plan);
    let first = file.size().unwrap_err().to_string();
    // Remembered: the same error again, without a second build.
    assert_eq!(file.read_range(0, 10).unwrap_err().to_string(), first);
    first
}

#[test]
fn hostile_plans_are_refused_with_a_reason() {
    let f64s = Element::Num(NumType::Float64);
    let cases: Vec<(Plan, &str)> = vec![
        (
            {
                let mut p = Plan::new((1, 8));
                p.dataset("x", f64s, vec![3], Content::values(vec![0; 16]));
                p
            },
            "16 bytes where its dataspace takes 24",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.dataset("x", f64s, vec![3], Content::Empty);
                p
            },
            "no content for 3 elements",
        ),
        (
            {
                // A huge claim: refused before anything is allocated.
                let mut p = Plan::new((1, 8));
                p.dataset("x", f64s, vec![1 << 40, 1 << 40], Content::values(vec![]));
                p
            },
            "too many elements",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.dataset("x", f64s, vec![1 << 61], Content::values(vec![]));
                p
            },
            "too many bytes",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.dataset("a/x", f64s, vec![0], Content::Empty);
                p
            },
            "parent group a is not (yet) in the plan",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.group("a");
                p.group("a");
                p
            },
            "twice in the plan",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.dataset("x", Element::VlenUtf8, vec![3], strings(&["a", "b"]));
                p
            },
            "2 variable-length strings for 3",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.dataset(
                    "x",
                    Element::VlenUtf8,
                    vec![2],
                    Content::values(vec![0; 32]),
                );
                p
            },
            "variable-length strings given as bytes",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.dataset("x", Element::VlenUtf8, vec![1], strings(&["a\0b"]));
                p
            },
            "NUL",
        ),
        (
            {
                let mut p = Plan::new((1, 8));
                p.group("a/");
                p
            },
            "not a member name",
        ),
    ];
    for (plan, why) in cases {
        let error = build_error(plan);
        assert!(error.contains(why), "{error:?} does not say {why:?}");
    }
}

#[test]
fn an_empty_plan_is_an_empty_hdf5_file() {
    let file = Hdf5File::new("empty.h5", Plan::new((1, 8)));
    let image = whole(&file, 1 << 20);
    let (_dir, h5) = open(&image);
    assert!(h5.member_names().unwrap().is_empty());
}

#[test]
fn the_same_plan_gives_the_same_bytes() {
    let a = whole(
        &Hdf5File::new("a.h5", every_kind(&counting(u64::MAX), 100)),
        1 << 20,
    );
    let b = whole(
        &Hdf5File::new("b.h5", every_kind(&counting(u64::MAX), 100)),
        1 << 20,
    );
    assert_eq!(a, b);
}

#[test]
fn concurrent_first_reads_share_one_build() {
    let file = Hdf5File::new("shared.h5", every_kind(&counting(u64::MAX), 100));
    let sizes: Vec<(u64, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let size = file.size().unwrap();
                    let built = file.built().unwrap() as *const Built as usize;
                    (size, built)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");
    assert!(
        crate::stores::lock(&file.plan).is_none(),
        "the plan is dropped once made"
    );
}

/// The interleaving of a first read that comes while another one builds: the build pauses
/// inside (its content's size is asked of a sizer that waits), the second reader is started and
/// must wait for the lock, then the build goes on; both get the one result.
#[test]
fn a_read_during_the_build_waits_for_its_result() {
    use std::sync::mpsc::channel;
    let (asked, sizer_asked) = channel::<()>();
    let (go, sizer_go) = channel::<()>();
    let (asked, sizer_go) = (Mutex::new(asked), Mutex::new(sizer_go));
    let content = Blob::ranged_sized(
        move || {
            crate::stores::lock(&asked).send(()).unwrap();
            crate::stores::lock(&sizer_go).recv().unwrap();
            Ok(8)
        },
        counting(u64::MAX),
    );
    let mut plan = Plan::new((1, 8));
    plan.dataset(
        "x",
        Element::Num(NumType::Float64),
        vec![1],
        Content::Bytes(content),
    );
    let file = Hdf5File::new("paused.h5", plan);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| file.size());
        // The first reader is inside the build, the plan's lock held.
        sizer_asked.recv().unwrap();
        assert!(file.plan.try_lock().is_err());
        let second = scope.spawn(|| file.size());
        // The second reader finds nothing built and waits on the lock (give it time to get
        // there; were it later, it would find the result and pass as well).
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!second.is_finished());
        go.send(()).unwrap();
        // The blob asks its sizer again at every use: let the later asks through.
        for _ in 0..8 {
            let _ = go.send(());
        }
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        assert_eq!(a.unwrap(), b.unwrap());
    });
}
