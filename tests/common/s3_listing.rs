//! The S3 `ListObjectsV2` answer of a directory (for [`super::fault_server::FaultServer`]):
//! keys are the files' relative paths, `prefix` and `delimiter=/` group them into common
//! prefixes, and pages of at most `page_size` names are chained by continuation tokens (which
//! hold `&` and spaces, so that a client must escape them).
#![allow(dead_code)]

use std::path::Path;

use super::fault_server::percent_decode;

fn keys(dir: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        match entry.file_type() {
            Ok(t) if t.is_dir() => keys(&entry.path(), &key, out),
            Ok(t) if t.is_file() => out.push(key),
            _ => {}
        }
    }
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The XML answer to `query` for the bucket directory `bucket` (`None`: a bad request).
pub fn list_objects_v2(bucket: &Path, query: &str, page_size: usize) -> Option<String> {
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{name}=")))
            .map(percent_decode)
    };
    let prefix = param("prefix").unwrap_or_default();
    let delimiter = param("delimiter");
    let start: usize = match param("continuation-token") {
        Some(token) => token.strip_prefix("page & ")?.parse().ok()?,
        None => 0,
    };
    let mut all = Vec::new();
    keys(bucket, "", &mut all);
    let mut names: Vec<(String, bool)> = Vec::new();
    for key in all.iter().filter(|k| k.starts_with(&prefix)) {
        let rest = &key[prefix.len()..];
        match (delimiter.as_deref(), rest.find('/')) {
            (Some("/"), Some(at)) => names.push((format!("{prefix}{}", &rest[..=at]), true)),
            _ => names.push((key.clone(), false)),
        }
    }
    names.sort();
    names.dedup();
    let end = (start + page_size).min(names.len());
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
    );
    xml.push_str(&format!(
        "<Name>b</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount>",
        xml_escape(&prefix),
        end - start.min(end)
    ));
    if end < names.len() {
        xml.push_str(&format!(
            "<IsTruncated>true</IsTruncated><NextContinuationToken>page &amp; {end}</NextContinuationToken>"
        ));
    } else {
        xml.push_str("<IsTruncated>false</IsTruncated>");
    }
    for (name, is_prefix) in names.get(start.min(end)..end).unwrap_or(&[]) {
        if *is_prefix {
            xml.push_str(&format!(
                "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
                xml_escape(name)
            ));
        } else {
            xml.push_str(&format!(
                "<Contents><Key>{}</Key><Size>0</Size></Contents>",
                xml_escape(name)
            ));
        }
    }
    xml.push_str("</ListBucketResult>");
    Some(xml)
}
