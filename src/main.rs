//! `daf-mount SOURCE MOUNTPOINT [options]`: see `daf-mount --help`.

#![deny(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    daf_mount::cli::main(daf_mount::cli::Args::parse())
}
