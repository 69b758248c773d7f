//! `daf-mount generate man|completions SHELL`: the man page and shell completion scripts, made
//! from the same clap definitions as the program's own parsing, so they never disagree with it.
//! A subcommand (not an `xtask`) so that it works after `cargo install`:
//! `daf-mount generate man --dir ~/.local/share/man/man1` (every page), or `generate man` (the
//! main page on stdout).

use std::io::Write;

use super::Generate;

/// Writes what `what` asks for to stdout.
pub fn generate(what: Generate, mut command: clap::Command) -> std::io::Result<()> {
    let mut out = Vec::new();
    match what {
        Generate::Man { dir: Some(dir) } => return clap_mangen::generate_to(command, dir),
        // The same page as `--dir` writes, which names no `help` page (there is none).
        Generate::Man { dir: None } => {
            clap_mangen::Man::new(command.disable_help_subcommand(true)).render(&mut out)?
        }
        Generate::Completions { shell } => {
            clap_complete::generate(shell, &mut command, "daf-mount", &mut out)
        }
    }
    std::io::stdout().write_all(&out)
}
