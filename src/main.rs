//! `daf-mount SOURCE MOUNTPOINT [options]`: see `daf-mount --help`.

#![deny(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = daf_mount::cli::Args::parse();
    let default_level = match args.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
        .format_timestamp_millis()
        // ureq logs request headers at debug (custom ones, tokens included): never shown.
        .filter_module("ureq", log::LevelFilter::Warn)
        .init();
    match daf_mount::cli::run(args).map_err(anyhow::Error::from) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("daf-mount: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
