//! Conventions of a Unix file system program: a man page and shell completions generated from
//! the clap definitions, `--help` with examples, and mounting through `mount -t fuse.daf-mount`
//! and an fstab line with every option in `-o` form.

mod common;

use std::path::Path;
use std::process::Command;

use common::{force_abort, is_mounted, BIN, VECTORS};

fn generate(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("generate")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_man_page_documents_every_option_and_subcommand() {
    let man = generate(&["man"]);
    assert!(man.starts_with(".ie \\n(.g .ds Aq"), "{}", &man[..80]);
    assert!(man.contains(".TH daf-mount 1"), "{man}");
    for needle in [
        "\\-\\-log\\-file",
        "\\-\\-zarr\\-format",
        "\\-\\-view",
        "daf\\-mount\\-status(1)",
        "log_file=FILE",
        "fuse.daf\\-mount",
    ] {
        assert!(man.contains(needle), "{needle} missing from the man page");
    }
    // With --dir, a page for the program and one for each subcommand it names.
    let dir = tempfile::tempdir().unwrap();
    generate(&["man", "--dir", dir.path().to_str().unwrap()]);
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    assert_eq!(
        pages,
        [
            "daf-mount-generate-completions.1",
            "daf-mount-generate-man.1",
            "daf-mount-generate.1",
            "daf-mount-status.1",
            "daf-mount.1"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("daf-mount.1")).unwrap(),
        man
    );
    let status = std::fs::read_to_string(dir.path().join("daf-mount-status.1")).unwrap();
    assert!(status.contains("SOURCE_OR_MOUNTPOINT") || status.contains("TARGET"));
    // man(1) renders it without warnings, when it is installed.
    let rendered = Command::new("sh")
        .arg("-c")
        .arg("command -v groff >/dev/null || exit 0; groff -man -Tutf8 -ww -z 2>&1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(man.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&rendered.stdout), "");
}

#[test]
fn completions_know_the_options_and_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = generate(&["completions", shell]);
        for needle in ["log-file", "zarr-format", "status", "generate"] {
            assert!(script.contains(needle), "{shell}: {needle} missing");
        }
    }
    let bash = generate(&["completions", "bash"]);
    let checked = Command::new("bash")
        .args(["-n", "-c", &bash])
        .status()
        .unwrap();
    assert!(checked.success(), "the bash completion does not parse");
    let unknown = Command::new(BIN)
        .args(["generate", "completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn help_has_examples() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    for needle in [
        "Examples:",
        "daf-mount status /mnt/x",
        "mount -t fuse.daf-mount",
        "fuse.daf-mount  ro,nofail",
        "--log-file",
        "generate man --dir",
    ] {
        assert!(help.contains(needle), "{needle} missing from --help");
    }
}

/// Runs `script` in a private mount namespace in which `/usr/local/bin` holds only a
/// `daf-mount` link to the binary under test: mount(8) runs its helpers with a fixed PATH, so
/// this is how `mount -t fuse.daf-mount` finds it, as it finds an installed one.
fn in_namespace(script: &str, vars: &[(&str, &Path)]) -> std::process::Output {
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(BIN, bin.path().join("daf-mount")).unwrap();
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "set -e; mount --bind \"$FAKE_BIN\" /usr/local/bin; {script}"
        ))
        .env("FAKE_BIN", bin.path());
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[test]
fn mount_t_fuse_daf_mount_and_fstab_take_every_option_in_o_form() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let log = tmp.path().join("daf.log");
    let source = Path::new(VECTORS).join("zarr_v2.daf.zarr.zip");
    let fstab = tmp.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# a comment\n{} {} fuse.daf-mount ro,nofail,view=files,files_version=1.1,\
             log_file={},threads=2 0 0\n",
            source.display(),
            mnt.display(),
            log.display()
        ),
    )
    .unwrap();
    // mount -t: the Zarr view alone, in Zarr v3; then the fstab line: the FilesDaf view alone,
    // in version 1.1, logging to a file. Each shows what its options ask for.
    let script = r#"
        mount -t fuse.daf-mount "$SRC" "$MNT" -o ro,view=zarr,zarr_format=3,dimension_names,zip
        cat "$MNT/zarr.json" > "$OUT/zarr.json"
        grep " $MNT " /proc/self/mountinfo > "$OUT/mountinfo"
        umount "$MNT"
        mount -T "$FSTAB" "$MNT"
        cat "$MNT/daf.json" > "$OUT/daf.json"
        umount "$MNT"
    "#;
    let out = in_namespace(
        script,
        &[
            ("SRC", &source),
            ("MNT", &mnt),
            ("FSTAB", &fstab),
            ("OUT", tmp.path()),
        ],
    );
    if is_mounted(&mnt) {
        force_abort(&mnt);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let zarr: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("zarr.json")).unwrap()).unwrap();
    assert_eq!(zarr["zarr_format"], 3, "{zarr}");
    let mountinfo = std::fs::read_to_string(tmp.path().join("mountinfo")).unwrap();
    assert!(
        mountinfo.contains(" - fuse.daf-mount ") && mountinfo.contains(" ro"),
        "{mountinfo}"
    );
    let daf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("daf.json")).unwrap()).unwrap();
    assert_eq!(daf["version"], serde_json::json!([1, 1]), "{daf}");
    // The fstab line's log_file= was honoured (the daemon ran in the background).
    assert!(log.exists(), "no log file");
}
