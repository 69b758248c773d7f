//! Tests of the derived arrays: every range, across pieces.

use super::*;

fn blob(bytes: Vec<u8>) -> Arc<Blob> {
    Blob::ready(Bytes::from_vec(bytes))
}

fn every_range(blob: &Arc<Blob>) -> Vec<u8> {
    let len = blob.len().unwrap();
    let whole = blob.read_range(0, len).unwrap().as_slice().to_vec();
    for a in 0..len {
        for b in a + 1..=len {
            let part = blob.read_range(a, b - a).unwrap();
            assert_eq!(
                part.as_slice(),
                &whole[a as usize..b as usize],
                "[{a}, {b})"
            );
        }
    }
    whole
}

#[test]
fn indices_are_shifted_and_widened_by_range() {
    let rowval: Vec<u8> = [1u16, 3, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    let shown = shifted(&blob(rowval), NumType::UInt16, 3, "t");
    let want: Vec<u8> = [0i32, 2, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(every_range(&shown), want);
    let colptr: Vec<u8> = [1u32, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let shown = shifted(&blob(colptr), NumType::UInt32, 3, "t");
    let want: Vec<u8> = [0i64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(every_range(&shown), want);
    let zero = shifted(&blob(vec![0, 0, 0, 0]), NumType::Int32, 1, "t");
    assert!(zero.read_range(0, 4).is_err(), "a 0 in a 1-based index");
}

#[test]
fn a_sparse_vector_is_densified_by_range() {
    let nzind: Vec<u8> = [1i64, 3, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
    let nzval: Vec<u8> = [10i16, -30, 60]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let dense = densified(
        &blob(nzind.clone()),
        NumType::Int64,
        Some(&blob(nzval)),
        NumType::Int16,
        7,
        "t",
    );
    let want: Vec<u8> = [10i16, 0, -30, 0, 0, 60, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(every_range(&dense), want);
    let bools = densified(&blob(nzind), NumType::Int64, None, NumType::Bool, 6, "t");
    assert_eq!(every_range(&bools), vec![1, 0, 1, 0, 0, 1]);
    let none = densified(&blob(vec![]), NumType::UInt8, None, NumType::Bool, 3, "t");
    assert_eq!(every_range(&none), vec![0, 0, 0]);
}

#[test]
fn ranges_across_pieces_are_made_piece_by_piece() {
    // 600,000 UInt16 indices shown as int32: 2.4 MB, three pieces.
    let n = 600_000u64;
    let rowval: Vec<u8> = (0..n)
        .flat_map(|i| ((i % 60_000 + 1) as u16).to_le_bytes())
        .collect();
    let shown = shifted(&blob(rowval), NumType::UInt16, n, "t");
    let want: Vec<u8> = (0..n)
        .flat_map(|i| ((i % 60_000) as i32).to_le_bytes())
        .collect();
    // A sparse Float64 vector of 400,000 entries (3.2 MB), every 7th stored.
    let len = 400_000u64;
    let nzind: Vec<u8> = (0..len.div_ceil(7))
        .flat_map(|k| (k * 7 + 1).to_le_bytes())
        .collect();
    let nzval: Vec<u8> = (0..len.div_ceil(7))
        .flat_map(|k| (k as f64 + 0.5).to_le_bytes())
        .collect();
    let dense = densified(
        &blob(nzind),
        NumType::UInt64,
        Some(&blob(nzval)),
        NumType::Float64,
        len,
        "t",
    );
    let dense_want: Vec<u8> = (0..len)
        .flat_map(|i| match i % 7 {
            0 => ((i / 7) as f64 + 0.5).to_le_bytes(),
            _ => 0f64.to_le_bytes(),
        })
        .collect();
    for (blob, want) in [(&shown, &want), (&dense, &dense_want)] {
        assert_eq!(blob.len().unwrap(), want.len() as u64);
        let piece = PIECE as usize;
        let ranges = [
            (0, 10),
            (piece - 3, 7),
            (piece - 1, piece + 2),
            (2 * piece + 5, 4096),
            (0, want.len()),
        ];
        for (at, n) in ranges {
            let n = n.min(want.len() - at);
            let got = blob.read_range(at as u64, n as u64).unwrap();
            assert!(got.as_slice() == &want[at..at + n], "[{at}, +{n})");
        }
    }
}

#[test]
fn a_matrix_is_transposed_by_range() {
    // Column-major 3 x 2 of Int16: a b c | d e f; C order: a d b e c f.
    let values: Vec<u8> = [1i16, 2, 3, 4, 5, 6]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let shown = transposed(&blob(values), NumType::Int16, (3, 2), "t");
    let want: Vec<u8> = [1i16, 4, 2, 5, 3, 6]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(every_range(&shown), want);
    // 700 x 500 Float32 (1.4 MB, two pieces, a piece ending inside a row).
    let (rows, cols) = (700u64, 500u64);
    let values: Vec<u8> = (0..rows * cols)
        .flat_map(|k| (k as f32).to_le_bytes())
        .collect();
    let shown = transposed(&blob(values), NumType::Float32, (rows, cols), "t");
    let want: Vec<u8> = (0..rows)
        .flat_map(|i| (0..cols).map(move |j| j * rows + i))
        .flat_map(|k| (k as f32).to_le_bytes())
        .collect();
    let piece = PIECE as usize;
    for (at, n) in [
        (0, want.len()),
        (piece - 6, 12),
        (piece, 4),
        (want.len() - 4, 4),
    ] {
        let got = shown.read_range(at as u64, n as u64).unwrap();
        assert!(got.as_slice() == &want[at..at + n], "[{at}, +{n})");
    }
    let short = transposed(&blob(vec![0; 10]), NumType::Int16, (3, 2), "t");
    assert!(
        short.read_range(0, 12).is_err(),
        "a payload shorter than its shape"
    );
}

#[test]
fn ones_and_transposed_strings() {
    assert_eq!(every_range(&ones(5)), vec![1; 5]);
    // Column-major 2 x 3: a b | c d | e f; C order: a c e b d f.
    let items: Vec<&[u8]> = vec![b"a", b"b", b"c", b"dd", b"", b"f"];
    let strings = Strings::from_vlen(blob(encode_vlen(items.into_iter(), 6)), 6);
    let shown = transposed_strings(&strings, 2, 3, "t");
    let want: Vec<&[u8]> = vec![b"a", b"c", b"", b"b", b"dd", b"f"];
    assert_eq!(
        shown.bytes().unwrap().as_slice(),
        encode_vlen(want.into_iter(), 6)
    );
    assert_eq!(shown.known_len(), Some(shown.bytes().unwrap().len()));
}
