//! The walk of a remote Zarr v3 ZarrDaf directory whose root `zarr.json` has no inline
//! `consolidated_metadata`: a v3 group names no children, so they come from the server's
//! directory listing (`stores::http::listing`: an HTML index or an S3 bucket listing, the first
//! that lists the root), and each node's `zarr.json` is fetched.
//!
//! Only the tree Daf defines is walked (`daf-formats.md` §4.2, §5): `scalars/NAME`,
//! `axes/NAME`, `vectors/AXIS/NAME[/PART]`, `matrices/R/C/NAME[/PART]`, so the walk is at most
//! five levels deep; it stops with an error past [`MAX_WALK_NODES`] nodes, [`MAX_WALK_NAMES`]
//! listed names in all, or one listing past `MAX_LISTING_ENTRIES` names. Each level's nodes are visited concurrently, at most
//! [`IN_FLIGHT`] at once, over the client's keep-alive pool; a visit is one GET of the node's
//! `zarr.json` and one listing of its directory (a group's children, an array's chunk
//! directories, so that a chunk a writer left out is left out here too).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::stores::http::listing::{Lister, Listing};
use crate::stores::http::{escape_key, redact, Fetch, HttpClient};
use crate::stores::parallel;

use crate::formats::FormatError;

/// Most nodes (groups and arrays) a walk visits; a larger tree is refused.
pub const MAX_WALK_NODES: usize = 100_000;

/// Most names all the listings of a walk may hold together (which bounds its memory).
pub const MAX_WALK_NAMES: usize = 1_000_000;

/// Most requests in flight during a walk.
pub const IN_FLIGHT: usize = 16;

/// The top-level groups of a ZarrDaf and how many levels below each one hold nodes.
const DAF_TREE: [(&str, usize); 4] = [("scalars", 1), ("axes", 1), ("vectors", 3), ("matrices", 4)];

/// What a walk found: every node's `zarr.json` (keyed `PATH/zarr.json`) and each array's listing.
#[derive(Debug, Default)]
pub struct Walked {
    /// The documents, as the server sent them.
    pub documents: BTreeMap<String, Vec<u8>>,
    /// The listing of each array's directory, keyed by the array's path.
    pub arrays: BTreeMap<String, Listing>,
}

/// A node to visit: its path below the source and how many levels below it may hold nodes.
struct Node {
    path: String,
    levels: usize,
}

/// What a visit found: the document, the listing, and the children to visit next.
type Visited = Option<(Vec<u8>, Option<Listing>, bool, Vec<Node>)>;

fn refused(base: &str, why: impl Into<String>) -> FormatError {
    FormatError::NotDaf {
        path: redact(base).into(),
        why: why.into(),
    }
}

/// Walks the source at `base` (its root `zarr.json` already read) through the server's listing.
pub fn walk(client: &HttpClient, base: &str) -> Result<Walked, FormatError> {
    let Some((lister, root)) = Lister::detect(client, base) else {
        return Err(refused(
            base,
            "a Zarr v3 source without consolidated metadata and a server that lists no \
             directories: consolidate it (zarr.consolidate_metadata) or enable directory \
             listing (nginx autoindex, an S3 bucket listing)",
        ));
    };
    log::info!("walking {} by its {}", redact(base), lister.describe());
    let started = std::time::Instant::now();
    let mut level: Vec<Node> = DAF_TREE
        .iter()
        .filter(|(name, _)| root.dirs.contains(*name))
        .map(|&(name, levels)| Node {
            path: name.to_string(),
            levels,
        })
        .collect();
    let mut walked = Walked::default();
    let budget = Budget {
        nodes: AtomicUsize::new(level.len()),
        names: AtomicUsize::new(root.dirs.len() + root.files.len()),
    };
    let mut seen = 0;
    while !level.is_empty() {
        seen += level.len();
        let results = parallel::map(&level, IN_FLIGHT, |node| {
            visit(client, &lister, base, node, &budget)
        })?;
        let mut next = Vec::new();
        for (node, result) in level.iter().zip(results) {
            let Some((document, listing, is_array, children)) = result else {
                continue;
            };
            walked
                .documents
                .insert(format!("{}/zarr.json", node.path), document);
            if let (true, Some(listing)) = (is_array, listing) {
                walked.arrays.insert(node.path.clone(), listing);
            }
            next.extend(children);
        }
        level = next;
    }
    log::info!(
        "walked {seen} Zarr nodes of {} in {:?}",
        redact(base),
        started.elapsed()
    );
    Ok(walked)
}

/// What a walk may still find: nodes to visit and names listed, counted as they are found.
struct Budget {
    nodes: AtomicUsize,
    names: AtomicUsize,
}

impl Budget {
    fn take(&self, base: &str, nodes: usize, names: usize) -> Result<(), FormatError> {
        if self.nodes.fetch_add(nodes, Ordering::Relaxed) + nodes > MAX_WALK_NODES {
            return Err(refused(
                base,
                format!("more than {MAX_WALK_NODES} Zarr nodes to walk"),
            ));
        }
        if self.names.fetch_add(names, Ordering::Relaxed) + names > MAX_WALK_NAMES {
            return Err(refused(
                base,
                format!("more than {MAX_WALK_NAMES} names in the listings"),
            ));
        }
        Ok(())
    }
}

/// Fetches one node's `zarr.json` and lists its directory (`None`: no `zarr.json`, not a node).
fn visit(
    client: &HttpClient,
    lister: &Lister,
    base: &str,
    node: &Node,
    budget: &Budget,
) -> Result<Visited, FormatError> {
    let url = format!("{base}/{}/zarr.json", escape_key(&node.path));
    let body = match client.get(&url) {
        Ok(got) => got.body,
        Err(Fetch::NotFound) => {
            log::debug!("walk: no {}, not a Zarr node", redact(&url));
            return Ok(None);
        }
        Err(Fetch::Transient(why) | Fetch::Failed(why)) => return Err(FormatError::Bad(why)),
    };
    let doc: Value =
        serde_json::from_slice(&body).map_err(|e| refused(&url, format!("bad JSON: {e}")))?;
    let is_array = match doc.get("node_type").and_then(Value::as_str) {
        Some("array") => true,
        Some("group") => false,
        _ => return Err(refused(&url, "no node_type \"group\" or \"array\"")),
    };
    if !is_array && node.levels == 0 {
        return Ok(Some((body, None, false, Vec::new())));
    }
    let listing = lister
        .list(client, &node.path)
        .map_err(|why| FormatError::Bad(format!("listing {}: {why}", node.path)))?;
    let children = if is_array { 0 } else { listing.dirs.len() };
    budget.take(base, children, listing.dirs.len() + listing.files.len())?;
    let children = if is_array {
        Vec::new()
    } else {
        listing
            .dirs
            .iter()
            .map(|name| Node {
                path: format!("{}/{name}", node.path),
                levels: node.levels - 1,
            })
            .collect()
    };
    Ok(Some((body, Some(listing), is_array, children)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bounds_nodes_and_names_over_the_whole_walk() {
        let budget = Budget {
            nodes: AtomicUsize::new(4),
            names: AtomicUsize::new(5),
        };
        budget.take("http://h/x", MAX_WALK_NODES - 4, 10).unwrap();
        let err = budget.take("http://h/x", 1, 0).unwrap_err().to_string();
        assert!(err.contains("Zarr nodes"), "{err}");
        let budget = Budget {
            nodes: AtomicUsize::new(0),
            names: AtomicUsize::new(0),
        };
        for _ in 0..10 {
            budget.take("http://h/x", 0, MAX_WALK_NAMES / 10).unwrap();
        }
        let err = budget.take("http://h/x", 0, 1).unwrap_err().to_string();
        assert!(err.contains("names in the listings"), "{err}");
    }
}
