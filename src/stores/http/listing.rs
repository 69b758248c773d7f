//! Listing a remote directory, for the walk of a Zarr v3 source without consolidated metadata
//! (`formats::remote::walk`): the names one level below a directory URL, as a web server's HTML
//! index (nginx `autoindex`, Apache, `python3 -m http.server`) or an S3-compatible bucket
//! listing (S3, MinIO, GCS XML API: `ListObjectsV2` with `delimiter=/`, continuation tokens
//! followed, virtual-hosted style first, then path style).
//!
//! Listings are hostile input: only names of one path segment are kept (`..`, `.`, names with
//! `/` or NUL after percent-decoding, absolute, scheme, `?` and `#` links are dropped), and a
//! directory of more than [`MAX_LISTING_ENTRIES`] names (or pages, or 64 MiB a page) is refused.

use std::collections::BTreeSet;

use crate::stores::http::{escape_key, redact, HttpClient};

/// Most names one listed directory may hold (a larger listing is refused).
pub const MAX_LISTING_ENTRIES: usize = 100_000;

/// Most pages one S3 listing may take (continuation tokens followed).
const MAX_PAGES: usize = 1_000;

/// Most bytes of one listing page (100,000 names of an nginx index take about 15 MiB).
const MAX_PAGE_BYTES: u64 = 64 << 20;

/// The names one level below a directory.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Sub-directories (`name/` links, S3 common prefixes).
    pub dirs: BTreeSet<String>,
    /// Files (other links, S3 keys).
    pub files: BTreeSet<String>,
}

impl Listing {
    fn add(&mut self, name: String, dir: bool) -> Result<(), String> {
        if dir {
            self.dirs.insert(name);
        } else {
            self.files.insert(name);
        }
        if self.dirs.len() + self.files.len() > MAX_LISTING_ENTRIES {
            return Err(format!("more than {MAX_LISTING_ENTRIES} names"));
        }
        Ok(())
    }
}

/// How a server lists its directories: the first mechanism that answered for the source's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lister {
    /// An HTML index page at `BASE/DIR/`.
    Html {
        /// The source's URL (no trailing `/`).
        base: String,
    },
    /// `ListObjectsV2` of the bucket at `bucket` (a URL), keys under `prefix`.
    S3 {
        /// The bucket's URL: the host root (virtual-hosted style) or `host/BUCKET` (path style).
        bucket: String,
        /// The source's key prefix in the bucket (no trailing `/`; empty at the bucket root).
        prefix: String,
    },
}

impl Lister {
    /// The first mechanism that lists the source at `base` (its root listing names
    /// `zarr.json`), with that root listing; `None` when none does.
    pub fn detect(client: &HttpClient, base: &str) -> Option<(Lister, Listing)> {
        let mut candidates = vec![Lister::Html {
            base: base.to_string(),
        }];
        // An S3 source's bucket is known: only its listing is asked.
        if let Some(bucket) = client.bucket() {
            let key = base.strip_prefix(bucket)?.trim_matches('/');
            candidates = vec![Lister::S3 {
                bucket: bucket.to_string(),
                prefix: percent_decode(key)?,
            }];
        } else if let Some((scheme_host, path)) = split_host(base) {
            let path = percent_decode(path.trim_matches('/')).unwrap_or_default();
            candidates.push(Lister::S3 {
                bucket: scheme_host.to_string(),
                prefix: path.clone(),
            });
            if let Some((bucket, prefix)) = path.split_once('/') {
                candidates.push(Lister::S3 {
                    bucket: format!("{scheme_host}/{}", escape_key(bucket)),
                    prefix: prefix.to_string(),
                });
            }
        }
        candidates.into_iter().find_map(|lister| {
            match lister.list(client, "") {
                Ok(root) if root.files.contains("zarr.json") => return Some((lister, root)),
                Ok(_) => log::debug!("{}: no zarr.json listed", lister.describe()),
                Err(why) => log::debug!("{}: {why}", lister.describe()),
            }
            None
        })
    }

    /// What the log says of this mechanism.
    pub fn describe(&self) -> String {
        match self {
            Lister::Html { base } => format!("HTML directory index of {}", redact(base)),
            Lister::S3 { bucket, prefix } => {
                format!("S3 ListObjectsV2 of {} prefix {prefix:?}", redact(bucket))
            }
        }
    }

    /// The listing of directory `dir` (`/`-separated, relative to the source; "" for its root).
    pub fn list(&self, client: &HttpClient, dir: &str) -> Result<Listing, String> {
        match self {
            Lister::Html { base } => {
                let url = if dir.is_empty() {
                    format!("{base}/")
                } else {
                    format!("{base}/{}/", escape_key(dir))
                };
                let got = client
                    .get_at_most(&url, MAX_PAGE_BYTES)
                    .map_err(|e| fetch_failed(&url, e))?;
                let text = String::from_utf8_lossy(&got.body);
                if !text.to_ascii_lowercase().contains("<a ") {
                    return Err(format!("{}: not an HTML directory index", redact(&url)));
                }
                parse_html(&text).map_err(|why| format!("{}: {why}", redact(&url)))
            }
            Lister::S3 { bucket, prefix } => {
                let key_prefix = [prefix.as_str(), dir]
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| format!("{p}/"))
                    .collect::<String>();
                self.list_s3(client, bucket, &key_prefix)
            }
        }
    }

    fn list_s3(
        &self,
        client: &HttpClient,
        bucket: &str,
        key_prefix: &str,
    ) -> Result<Listing, String> {
        let mut listing = Listing::default();
        let mut token: Option<String> = None;
        for _page in 0..MAX_PAGES {
            let mut url = format!(
                "{bucket}/?list-type=2&delimiter=%2F&prefix={}",
                query_escape(key_prefix)
            );
            if let Some(token) = &token {
                url.push_str(&format!("&continuation-token={}", query_escape(token)));
            }
            let got = client
                .get_at_most(&url, MAX_PAGE_BYTES)
                .map_err(|e| fetch_failed(&url, e))?;
            let text = String::from_utf8_lossy(&got.body);
            let next = parse_s3(&text, key_prefix, &mut listing)
                .map_err(|why| format!("{}: {why}", redact(&url)))?;
            match next {
                Some(next) if token.as_deref() == Some(next.as_str()) => {
                    return Err(format!(
                        "{}: the same continuation token twice",
                        redact(bucket)
                    ))
                }
                Some(next) => token = Some(next),
                None => return Ok(listing),
            }
        }
        Err(format!(
            "{}: a listing of more than {MAX_PAGES} pages",
            redact(bucket)
        ))
    }
}

fn fetch_failed(url: &str, fetch: crate::stores::http::Fetch) -> String {
    match fetch {
        crate::stores::http::Fetch::NotFound => format!("{}: not found (404)", redact(url)),
        crate::stores::http::Fetch::Transient(why) | crate::stores::http::Fetch::Failed(why) => why,
    }
}

/// `scheme://host[:port]` and the path after it.
fn split_host(url: &str) -> Option<(&str, &str)> {
    let after = url.find("://")? + 3;
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    Some((&url[..end], &url[end..]))
}

/// `text` as a query value: every byte outside the unreserved set percent-encoded.
fn query_escape(text: &str) -> String {
    escape_key(text).replace('/', "%2F")
}

/// The bytes `%XX`-decoded, as UTF-8 (`None` when they are not).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;`, `&#N;` and `&#xN;` decoded (HTML and XML text).
fn unescape_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let decoded = rest.find(';').filter(|&end| end <= 10).and_then(|end| {
            let name = &rest[1..end];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                _ => match name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok().and_then(char::from_u32),
                    None => name
                        .strip_prefix('#')
                        .and_then(|n| n.parse().ok())
                        .and_then(char::from_u32),
                },
            };
            c.map(|c| (c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// One listed name (already entity-decoded and percent-decoded) if it is a single, ordinary
/// path segment.
fn segment(name: &str) -> Option<String> {
    (!name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']))
        .then(|| name.to_string())
}

/// The names of an HTML directory index: relative `href`s of one segment (`name/` for a
/// directory).
pub fn parse_html(text: &str) -> Result<Listing, String> {
    let mut listing = Listing::default();
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("href") {
        let start = from + found + 4;
        from = start;
        let rest = text[start..].trim_start();
        let Some(rest) = rest.strip_prefix('=') else {
            continue;
        };
        let rest = rest.trim_start();
        let value = match rest.chars().next() {
            Some(quote @ ('"' | '\'')) => rest[1..].split(quote).next().unwrap_or(""),
            _ => rest
                .split(|c: char| c.is_ascii_whitespace() || c == '>')
                .next()
                .unwrap_or(""),
        };
        let href = unescape_entities(value);
        if href.starts_with('/') || href.contains(['?', '#', ':']) {
            continue;
        }
        let (raw, dir) = match href.strip_suffix('/') {
            Some(raw) => (raw, true),
            None => (href.as_str(), false),
        };
        if raw.contains('/') {
            continue;
        }
        if let Some(name) = percent_decode(raw).as_deref().and_then(segment) {
            listing.add(name, dir)?;
        }
    }
    Ok(listing)
}

/// The text of every `<tag>…</tag>` in `text`.
fn elements<'a>(text: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        rest = &rest[at + open.len()..];
        let Some(end) = rest.find(&close) else { break };
        out.push(&rest[..end]);
        rest = &rest[end + close.len()..];
    }
    out
}

/// Adds one page of a `ListObjectsV2` answer for `key_prefix` to `listing`; returns the
/// continuation token of the next page, if any.
pub fn parse_s3(
    text: &str,
    key_prefix: &str,
    listing: &mut Listing,
) -> Result<Option<String>, String> {
    if !text.contains("<ListBucketResult") {
        return Err("not an S3 ListObjectsV2 answer".into());
    }
    let named = |full: &str| {
        let full = unescape_entities(full);
        full.strip_prefix(key_prefix).map(str::to_string)
    };
    for common in elements(text, "CommonPrefixes") {
        for prefix in elements(common, "Prefix") {
            if let Some(name) = named(prefix).and_then(|n| n.strip_suffix('/').and_then(segment)) {
                listing.add(name, true)?;
            }
        }
    }
    for contents in elements(text, "Contents") {
        for key in elements(contents, "Key") {
            if let Some(name) = named(key).as_deref().and_then(segment) {
                listing.add(name, false)?;
            }
        }
    }
    let truncated = elements(text, "IsTruncated")
        .first()
        .is_some_and(|t| t.trim() == "true");
    let token = elements(text, "NextContinuationToken")
        .first()
        .map(|t| unescape_entities(t.trim()));
    match (truncated, token) {
        (true, Some(token)) if !token.is_empty() => Ok(Some(token)),
        (true, _) => Err("a truncated listing without NextContinuationToken".into()),
        (false, _) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(listing: &Listing) -> (Vec<&str>, Vec<&str>) {
        (
            listing.dirs.iter().map(String::as_str).collect(),
            listing.files.iter().map(String::as_str).collect(),
        )
    }

    #[test]
    fn html_indexes_give_relative_names_of_one_segment() {
        let nginx = r#"<html><head><title>Index of /x/</title></head><body><pre>
<a href="../">../</a>
<a href="axes/">axes/</a>                                              23-Nov-2026 00:00   -
<a href="a%20b/">a b/</a>
<a href="zarr.json">zarr.json</a>                                          23-Nov-2026 00:00  64
</pre></body></html>"#;
        let listing = parse_html(nginx).unwrap();
        assert_eq!(names(&listing), (vec!["a b", "axes"], vec!["zarr.json"]));
        let apache = r##"<a href="?C=N;O=D">Name</a> <a href="/x/">Parent Directory</a>
            <A HREF='vectors/'>vectors/</A> <a href=scalars/>scalars/</a>
            <a href="http://evil/">x</a> <a href="mailto:a@b">m</a> <a href="#top">t</a>
            <a href="a/b/">nested</a> <a href="..%2Fx/">up</a> <a href="%2E%2E/">up</a>
            <a href="./">here</a> <a href="c&amp;d">amp</a> <a href="%FF">bad utf-8</a>"##;
        let listing = parse_html(apache).unwrap();
        assert_eq!(names(&listing), (vec!["scalars", "vectors"], vec!["c&d"]));
    }

    #[test]
    fn huge_listings_are_refused() {
        let page: String = (0..=MAX_LISTING_ENTRIES)
            .map(|i| format!("<a href=\"n{i}/\">n</a>\n"))
            .collect();
        let err = parse_html(&page).unwrap_err();
        assert!(err.contains("more than"), "{err}");
    }

    #[test]
    fn s3_pages_give_prefixes_and_keys_below_the_prefix() {
        let page = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<Prefix>x.daf.zarr/</Prefix><KeyCount>4</KeyCount><IsTruncated>true</IsTruncated>
<NextContinuationToken>t&amp;1</NextContinuationToken>
<Contents><Key>x.daf.zarr/zarr.json</Key><Size>64</Size></Contents>
<Contents><Key>x.daf.zarr/</Key></Contents>
<Contents><Key>other/zarr.json</Key></Contents>
<CommonPrefixes><Prefix>x.daf.zarr/axes/</Prefix></CommonPrefixes>
<CommonPrefixes><Prefix>x.daf.zarr/../</Prefix></CommonPrefixes>
</ListBucketResult>"#;
        let mut listing = Listing::default();
        let next = parse_s3(page, "x.daf.zarr/", &mut listing).unwrap();
        assert_eq!(next.as_deref(), Some("t&1"));
        assert_eq!(names(&listing), (vec!["axes"], vec!["zarr.json"]));
        let last = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
        assert_eq!(parse_s3(last, "", &mut listing).unwrap(), None);
        assert!(parse_s3("<Error><Code>NoSuchBucket</Code></Error>", "", &mut listing).is_err());
    }

    #[test]
    fn both_bucket_styles_are_candidates() {
        assert_eq!(
            split_host("http://h:9000/b/x.daf.zarr"),
            Some(("http://h:9000", "/b/x.daf.zarr"))
        );
        assert_eq!(split_host("https://h"), Some(("https://h", "")));
        assert_eq!(query_escape("a b/c"), "a%20b%2Fc");
    }
}
