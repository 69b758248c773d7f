//! daf-mount: mount a Daf data set and see it as FilesDaf and as Zarr, over the same bytes.
//!
//! Layers, each importing only the ones below it (see `doc/ARCHITECTURE.md`):
//! `fuse` (kernel adapter) → `core` (filesystem namespace, testable without a kernel) →
//! `views` (FilesDaf and Zarr trees synthesised from a data set) → `formats` (Daf model and the
//! readers of each on-disk layout) → `stores` (directories, ZIP archives, shared byte blobs) →
//! `sys` (the only `unsafe`: memory maps, `fork`, closing inherited descriptors, C-Blosc).

#![deny(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::undocumented_unsafe_blocks
)]

pub mod cli;
pub mod core;
pub mod formats;
pub mod fuse;
pub mod staging;
pub mod stores;
pub mod sys;
pub mod views;
