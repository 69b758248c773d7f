//! The HTTP store: a remote source as a [`Store`]. Its keys are what it was told (the documents
//! and chunk keys of a Zarr directory's consolidated metadata, built by `formats::remote`) or what
//! it read (the central directory of a remote ZIP, `http_zip`); it never lists the server. Reads
//! are ranged GETs through the block cache ([`super::http_object`]), returned as owned buffers;
//! it never maps ([`Store::map`] is `Ok(None)`).

use std::sync::Arc;
use std::time::SystemTime;

use super::http::{redact, HttpClient};
use super::http_zip::open_remote_zip;
use super::store::{Indexed, Store};
use super::{Bytes, StoreError, StoreIndex};

/// A remote source (a Zarr directory or a ZIP archive behind a URL).
#[derive(Clone, Debug)]
pub struct HttpStore {
    inner: Indexed,
    client: Arc<HttpClient>,
}

impl HttpStore {
    /// The store of the remote directory at `url` whose keys and blobs are `index` (built from
    /// its consolidated metadata, blobs fetched through `client`).
    pub fn from_index(client: Arc<HttpClient>, url: &str, index: StoreIndex) -> HttpStore {
        HttpStore {
            inner: Indexed {
                what: format!("remote directory {}", redact(url)),
                index,
            },
            client,
        }
    }

    /// The remote ZIP archive at `url`: its end and central directory are fetched now, its
    /// members on demand.
    pub fn open_zip(client: Arc<HttpClient>, url: &str) -> Result<HttpStore, StoreError> {
        let index = open_remote_zip(&client, url)?;
        Ok(HttpStore {
            inner: Indexed {
                what: format!("remote ZIP archive {}", redact(url)),
                index,
            },
            client,
        })
    }

    /// The client the store fetches with.
    pub fn client(&self) -> &Arc<HttpClient> {
        &self.client
    }
}

impl Store for HttpStore {
    fn describe(&self) -> String {
        self.inner.what.clone()
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.inner.list(prefix))
    }

    fn size(&self, key: &str) -> Result<u64, StoreError> {
        self.inner.size(key)
    }

    fn mtime(&self, key: &str) -> Result<SystemTime, StoreError> {
        self.inner.mtime(key)
    }

    fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.inner.read_range(key, offset, len)
    }

    fn index(&self) -> Result<StoreIndex, StoreError> {
        Ok(self.inner.index.clone())
    }

    fn root_mtime(&self) -> Option<SystemTime> {
        self.inner.index.root_mtime
    }
}

#[cfg(test)]
#[allow(dead_code)]
#[path = "../../tests/http_sources/server.rs"]
mod test_server;

#[cfg(test)]
mod tests {
    use super::test_server::Server;
    use super::*;
    use crate::stores::conformance::{check_store, write_zip};
    use crate::stores::http::HttpOptions;
    use crate::stores::http_object::RemoteObject;
    use crate::stores::Entry;

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
            Box::new(HttpStore::from_index(client, &server.base, index))
        });
    }

    #[test]
    fn a_remote_zip_conforms() {
        check_store(|files| {
            let dir = tempfile::tempdir().unwrap().keep();
            write_zip(&dir.join("x.zip"), files);
            let server = Server::start(&dir);
            Box::new(HttpStore::open_zip(client(), &server.url("x.zip")).unwrap())
        });
    }
}
