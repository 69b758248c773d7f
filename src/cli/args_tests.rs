use super::*;

#[test]
fn view_formats_come_from_the_command_line_then_the_o_options() {
    let args = |extra: &[&str]| {
        Args::try_parse_from(["daf-mount", "x.daf", "/mnt"].iter().chain(extra)).unwrap()
    };
    let o = MountOptions::parse(&["zarr_format=3,files_version=1.1".into()]).unwrap();
    assert_eq!(
        (o.zarr_format, o.files_version),
        (Some(Format::ZarrV3), Some(FilesVersion::V1_1))
    );
    let none = MountOptions::default();
    assert_eq!(args(&[]).view_options(&none).unwrap().zarr, None);
    assert_eq!(
        args(&[]).view_options(&o).unwrap().zarr,
        Some(Format::ZarrV3)
    );
    let given = args(&["--zarr-format", "2", "--files-version", "1.0"]);
    let chosen = given.view_options(&o).unwrap();
    assert_eq!(
        (chosen.zarr, chosen.files),
        (Some(Format::ZarrV2), Some(FilesVersion::V1_0))
    );
    assert!(Args::try_parse_from(["daf-mount", "x", "/m", "--zarr-format", "4"]).is_err());
    let zip = MountOptions::parse(&["ro,zip".into()]).unwrap();
    assert!(
        args(&[]).view_options(&zip).unwrap().zip
            && args(&["--zip"]).view_options(&none).unwrap().zip
    );
    assert!(!args(&[]).view_options(&none).unwrap().zip);
    assert!(MountOptions::parse(&["files_version=2.0".into()]).is_err());
    let named = MountOptions::parse(&["ro,dimension_names".into()]).unwrap();
    assert!(args(&[]).view_options(&named).unwrap().dimension_names);
    assert!(
        args(&["--dimension-names"])
            .view_options(&none)
            .unwrap()
            .dimension_names
    );
    assert!(!args(&[]).view_options(&o).unwrap().dimension_names);
}

#[test]
fn anndata_takes_an_optional_value_and_needs_both_views() {
    let args = |extra: &[&str]| {
        Args::try_parse_from(["daf-mount", "x.daf", "/mnt"].iter().chain(extra)).unwrap()
    };
    let none = MountOptions::default();
    let asked = |args: &Args, o: &MountOptions| args.view_options(o).unwrap().anndata;
    assert_eq!(asked(&args(&[]), &none), None);
    assert_eq!(
        asked(&args(&["--anndata"]), &none),
        Some(Request::default())
    );
    let chosen = asked(&args(&["--anndata", "cell:gene:UMIs"]), &none).unwrap();
    assert_eq!(chosen.x.as_deref(), Some("UMIs"));
    let o = MountOptions::parse(&["ro,anndata=cell:gene".into()]).unwrap();
    assert_eq!(asked(&args(&[]), &o).unwrap().var.as_deref(), Some("gene"));
    let bare = MountOptions::parse(&["anndata".into()]).unwrap();
    assert_eq!(asked(&args(&[]), &bare), Some(Request::default()));
    // Before SOURCE, a bare --anndata takes SOURCE as its value: a usage error.
    let early = Args::try_parse_from(["daf-mount", "--anndata", "x.daf", "/mnt", "/m2"]);
    let why = early.unwrap().view_options(&none).unwrap_err();
    assert!(
        matches!(&why, CliError::Usage(w) if w.contains("OBS:VAR")),
        "{why}"
    );
    let files = args(&["--anndata", "--view", "files"]).view_options(&none);
    assert!(matches!(files, Err(CliError::Usage(w)) if w.contains("--view both")));
}

#[test]
fn mount_options_parse_like_mount_fuse3_passes_them() {
    let o = MountOptions::parse(&[
        "ro,noatime,allow_other,dev,suid".into(),
        "fsname=x,x-systemd.automount".into(),
    ])
    .unwrap();
    assert_eq!(
        o,
        MountOptions {
            allow_other: true,
            fsname: Some("x".into()),
            read_only: true,
            ..MountOptions::default()
        }
    );
    assert!(!MountOptions::parse(&["rw".into()]).unwrap().read_only);
    assert!(MountOptions::parse(&["bogus".into()])
        .unwrap_err()
        .to_string()
        .contains("bogus"));
    assert!(MountOptions::parse(&["auto_unmount".into()]).is_err());
}

#[test]
fn every_command_line_option_has_an_o_form() {
    let o = MountOptions::parse(&[
        "view=zarr,log_file=/var/log/d.log,threads=3,dimension_names,zip".into(),
    ])
    .unwrap();
    assert_eq!(o.view, Some(ViewArg::Zarr));
    assert_eq!(o.log_file, Some(PathBuf::from("/var/log/d.log")));
    assert_eq!(o.threads, Some(3));
    assert!(o.dimension_names && o.zip);
    let args = Args::try_parse_from(["daf-mount", "x.daf", "/mnt"]).unwrap();
    assert_eq!(args.selection(&o), ViewSelection::Zarr);
    let given = Args::try_parse_from(["daf-mount", "x.daf", "/mnt", "--view", "files"]);
    assert_eq!(given.unwrap().selection(&o), ViewSelection::Files);
    for bad in ["view=all", "threads=0", "threads=many"] {
        let err = MountOptions::parse(&[bad.into()]).unwrap_err().to_string();
        assert!(err.contains(bad), "{err}");
    }
}

#[test]
fn subcommands_need_no_source_and_a_mount_needs_both() {
    let status = Args::try_parse_from(["daf-mount", "status", "/mnt/x"]).unwrap();
    assert!(matches!(status.command, Some(Command::Status(s)) if s.target == "/mnt/x"));
    let man = Args::try_parse_from(["daf-mount", "generate", "man"]).unwrap();
    assert!(matches!(
        man.command,
        Some(Command::Generate {
            what: Generate::Man { dir: None }
        })
    ));
    assert!(Args::try_parse_from(["daf-mount", "x.daf"]).is_err());
    assert!(Args::try_parse_from(["daf-mount"]).is_err());
}

#[test]
fn s3_options_parse() {
    let o = MountOptions::parse(&[
        "endpoint=http://127.0.0.1:9000,region=eu-west-1,profile=lab".into(),
        "addressing=virtual,no_sign".into(),
    ])
    .unwrap();
    let s3 = &o.http.s3;
    assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(s3.region.as_deref(), Some("eu-west-1"));
    assert_eq!(s3.profile.as_deref(), Some("lab"));
    assert_eq!(
        s3.addressing,
        Some(crate::stores::http::s3::Addressing::Virtual)
    );
    assert!(s3.no_sign);
    for bad in ["endpoint=ftp://h", "addressing=sideways", "region="] {
        assert!(MountOptions::parse(&[bad.into()]).is_err(), "{bad}");
    }
}

#[test]
fn remote_options_parse_and_errors_hide_secrets() {
    let o = MountOptions::parse(&[
        "ro,cache=/tmp/c,cache_size=2G,timeout=2.5,retries=7".into(),
        "header=X-Key: s3cret,token=t0ken".into(),
    ])
    .unwrap();
    assert_eq!(o.http.cache_dir, Some("/tmp/c".into()));
    assert_eq!(o.http.cache_size, 2 << 30);
    assert_eq!(o.decode_cache, None);
    let d = MountOptions::parse(&["decode_cache=64M".into()]).unwrap();
    assert_eq!(d.decode_cache, Some(64 << 20));
    assert!(MountOptions::parse(&["decode_cache=lots".into()]).is_err());
    assert_eq!(o.http.timeout, std::time::Duration::from_millis(2500));
    assert_eq!(o.http.retries, 7);
    assert_eq!(o.http.headers, [("X-Key".into(), "s3cret".into())]);
    assert_eq!(o.http.token.as_deref(), Some("t0ken"));
    assert!(!o.rw_given && MountOptions::parse(&["rw".into()]).unwrap().rw_given);
    for bad in [
        "cache_size=lots",
        "timeout=0",
        "retries=-1",
        "header=:s3cret",
    ] {
        let err = MountOptions::parse(&[bad.into()]).unwrap_err().to_string();
        assert!(!err.contains("s3cret") && err.contains('='), "{err}");
    }
}

#[test]
fn arguments_parse() {
    let a = Args::try_parse_from([
        "daf-mount",
        "x.daf",
        "/mnt",
        "-f",
        "-o",
        "ro",
        "--view",
        "zarr",
        "-vv",
    ])
    .unwrap();
    assert!(a.foreground);
    let none = MountOptions::default();
    assert_eq!((a.verbose, a.selection(&none)), (2, ViewSelection::Zarr));
    assert!(Args::try_parse_from(["daf-mount", "x.daf"]).is_err());
}
