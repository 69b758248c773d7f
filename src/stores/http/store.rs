//! The HTTP store: a remote source as a [`Store`]. Its keys are what it was told (the documents
//! and chunk keys of a Zarr directory's consolidated metadata, or of the walk of the server's
//! listing, built by `formats::remote`) or what it read (the central directory of a remote ZIP,
//! `zip`); it never lists the server itself. Reads
//! are ranged GETs through the block cache ([`crate::stores::http::object`]), returned as owned buffers;
//! it never maps ([`Store::map`] is `Ok(None)`).

use std::sync::Arc;

use crate::stores::http::zip::open_remote_zip;
use crate::stores::http::{redact, HttpClient};
use crate::stores::store::IndexedStore;
use crate::stores::{StoreError, StoreIndex};

/// The store of the remote directory at `url` whose keys and blobs are `index` (built from its
/// consolidated metadata or listing walk; its blobs fetch through the client they were made
/// with).
pub fn remote_directory(url: &str, index: StoreIndex) -> IndexedStore {
    IndexedStore::new(format!("remote directory {}", redact(url)), index, false)
}

/// The remote ZIP archive at `url`: its end and central directory are fetched now, its members
/// on demand.
pub fn remote_zip(client: &Arc<HttpClient>, url: &str) -> Result<IndexedStore, StoreError> {
    let index = open_remote_zip(client, url)?;
    Ok(IndexedStore::new(
        format!("remote ZIP archive {}", redact(url)),
        index,
        false,
    ))
}

#[cfg(test)]
#[allow(dead_code)]
#[path = "../../../tests/http_sources/server.rs"]
mod test_server;

#[cfg(test)]
mod tests {
    use super::test_server::Server;
    use super::*;
    use crate::stores::conformance::{check_store, write_zip};
    use crate::stores::http::object::RemoteObject;
    use crate::stores::http::HttpOptions;
    use crate::stores::Entry;
    use std::time::SystemTime;

    fn client() -> Arc<HttpClient> {
        HttpClient::new(HttpOptions {
            timeout: std::time::Duration::from_secs(5),
            ..HttpOptions::default()
        })
    }

    #[test]
    fn a_remote_directory_conforms() {
        check_store(|files| {
            let dir = tempfile::tempdir().unwrap().keep();
            let server = Server::start(&dir);
            let client = client();
            let mut entries = std::collections::BTreeMap::new();
            for (key, content) in files {
                let path = dir.join(key);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, content).unwrap();
                let object = RemoteObject::new(
                    client.clone(),
                    server.url(&crate::stores::http::escape_key(key)),
                    content.len() as u64,
                    None,
                    false,
                );
                let entry = Entry {
                    blob: object.into_blob(),
                    mtime: SystemTime::now(),
                };
                entries.insert(key.to_string(), entry);
            }
            let index = StoreIndex::new(entries, None);
            Box::new(remote_directory(&server.base, index))
        });
    }

    #[test]
    fn a_sequential_reader_leaves_in_memory_only_the_blocks_near_it() {
        let dir = tempfile::tempdir().unwrap().keep();
        let content: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("big"), &content).unwrap();
        let server = Server::start(&dir);
        let client = client();
        let object = RemoteObject::new(
            client.clone(),
            server.url("big"),
            content.len() as u64,
            None,
            false,
        );
        let blob = object.into_blob();
        let piece = 128 << 10;
        for offset in (0..content.len()).step_by(piece) {
            let got = blob.read_range(offset as u64, piece as u64).unwrap();
            assert!(
                got.as_slice() == &content[offset..offset + piece],
                "at {offset}"
            );
        }
        // The kernel's page cache holds what was read: memory keeps the last blocks only.
        let kept = client.cache.memory_used();
        assert!(
            kept <= 3 << 20,
            "{kept} bytes kept in memory after the read"
        );
        // A jump back reads the right bytes again.
        assert!(blob.read_range(0, 10).unwrap().as_slice() == &content[..10]);
    }

    #[test]
    fn a_read_of_a_file_queued_for_prefetch_does_not_wait_behind_the_queue() {
        let dir = tempfile::tempdir().unwrap().keep();
        let server = Server::start(&dir);
        let client = client();
        let blobs: Vec<_> = (0..200)
            .map(|n| {
                std::fs::write(dir.join(format!("f{n}")), [n as u8; 100]).unwrap();
                RemoteObject::new(
                    client.clone(),
                    server.url(&format!("f{n}")),
                    100,
                    None,
                    false,
                )
                .into_blob()
            })
            .collect();
        // Every answer takes 100 ms: the 16 prefetch threads need more than a second for the
        // queue.
        server
            .faults
            .delay_ms
            .store(100, std::sync::atomic::Ordering::SeqCst);
        for blob in &blobs {
            blob.prefetch();
        }
        let last = blobs.last().unwrap();
        assert_eq!(last.read_range(0, 100).unwrap().as_slice(), &[199u8; 100]);
        // Answered among the first, not after the 199 hinted before it.
        let log = server.requests();
        let at = log
            .iter()
            .position(|r| r.starts_with("GET /f199 "))
            .unwrap();
        assert!(at < 64, "the read was answered {at}th: {log:?}");
    }

    #[test]
    fn a_remote_zip_conforms() {
        check_store(|files| {
            let dir = tempfile::tempdir().unwrap().keep();
            write_zip(&dir.join("x.zip"), files);
            let server = Server::start(&dir);
            Box::new(remote_zip(&client(), &server.url("x.zip")).unwrap())
        });
    }

    #[test]
    fn a_remote_zip_whose_directory_starts_after_its_end_record_is_refused() {
        let dir = tempfile::tempdir().unwrap().keep();
        let path = dir.join("x.zip");
        write_zip(&path, &[("a", b"abc".as_slice())]);
        let mut bytes = std::fs::read(&path).unwrap();
        // The central directory offset (the ZIP64 end record's, else the EOCD's) points past
        // the EOCD itself.
        let eocd = bytes.len() - 22;
        let past = eocd as u64 + 1;
        if bytes[eocd - 20..eocd - 16] == 0x0706_4b50u32.to_le_bytes() {
            let at = u64::from_le_bytes(bytes[eocd - 12..eocd - 4].try_into().unwrap()) as usize;
            bytes[at + 48..at + 56].copy_from_slice(&past.to_le_bytes());
        } else {
            bytes[eocd + 16..eocd + 20].copy_from_slice(&(past as u32).to_le_bytes());
        }
        std::fs::write(&path, &bytes).unwrap();
        let server = Server::start(&dir);
        let err = remote_zip(&client(), &server.url("x.zip")).unwrap_err();
        assert!(err.to_string().contains("central directory"), "{err}");
    }
}
