//! The issue's attack: a FilesDaf source holding symbolic links to a root-only file outside it,
//! mounted with `-o allow_other`. Neither user `nobody` nor root may read the file through the
//! mount; links that stay inside the source keep working, for both.

mod common;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{force_abort, is_mounted, start_foreground, VECTORS};

const SECRET: &str = "TOPSECRET-6f1c2a";

/// The daemon, unmounted and reaped when dropped (also on panic).
struct Mounted {
    child: Child,
    mnt: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if is_mounted(&self.mnt) || self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            force_abort(&self.mnt);
            let _ = self.child.wait();
        }
    }
}

/// Runs `cmd` as user `nobody` (10 s at most): its exit success and stdout.
fn as_nobody(cmd: &[&str]) -> (bool, String) {
    let mut child = Command::new("runuser")
        .args(["-u", "nobody", "--", "timeout", "10"])
        .args(cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    (child.wait().unwrap().success(), out)
}

/// Every file's content below `root`, read as root.
fn read_everything(root: &Path, out: &mut String) {
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            read_everything(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
}

#[test]
fn links_out_of_the_source_are_not_served_to_anyone() {
    require_fuse!();
    // World-traversable places for the mount point; a root-only secret elsewhere.
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.json");
    std::fs::write(
        &secret,
        format!("{{\"type\":\"String\",\"value\":\"{SECRET}\"}}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();

    let source = top.path().join("files_v1_0.daf");
    let ok = Command::new("cp")
        .arg("-r")
        .arg(Path::new(VECTORS).join("files_v1_0.daf"))
        .arg(&source)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    Command::new("chmod")
        .args(["-R", "u+w,a+rX"])
        .arg(&source)
        .status()
        .unwrap();
    symlink(&secret, source.join("scalars/stolen.json")).unwrap();
    symlink(
        "../../../../../../../../../../etc/shadow",
        source.join("axes/shadow.txt"),
    )
    .unwrap();
    symlink("ratio.json", source.join("scalars/alias.json")).unwrap();

    let mnt = top.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = start_foreground(
        &[
            source.to_str().unwrap(),
            mnt.to_str().unwrap(),
            "-o",
            "ro,allow_other",
        ],
        Stdio::null(),
    );
    let mounted = Mounted {
        child,
        mnt: mnt.clone(),
    };
    let view = mnt.join("files_v1_0.daf");

    // The control: nobody reads the mount (allow_other works), including a link inside it.
    let (ok, text) = as_nobody(&["cat", view.join("scalars/alias.json").to_str().unwrap()]);
    assert!(
        ok && text.contains("2.5"),
        "nobody must read an inside link: {text:?}"
    );

    // The attack: the links out are not there, for nobody and for root.
    for rel in ["scalars/stolen.json", "axes/shadow.txt"] {
        let (ok, text) = as_nobody(&["cat", view.join(rel).to_str().unwrap()]);
        assert!(!ok && text.is_empty(), "nobody read {rel}: {text:?}");
        assert!(!view.join(rel).exists(), "{rel} is shown");
    }
    let (_, found) = as_nobody(&["grep", "-r", SECRET, mnt.to_str().unwrap()]);
    assert!(found.is_empty(), "nobody found the secret: {found}");
    let mut everything = String::new();
    read_everything(&mnt, &mut everything);
    assert!(
        !everything.contains(SECRET),
        "root read the secret through the mount"
    );
    assert!(
        !everything.contains("root:"),
        "root read /etc/shadow through the mount"
    );
    drop(mounted);
}
