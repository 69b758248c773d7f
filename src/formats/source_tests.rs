use super::*;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

#[test]
fn a_url_of_another_scheme_is_refused_as_given() {
    let err = parse_source("gs://b/p/x.daf.zarr?sig=s3cret")
        .unwrap_err()
        .to_string();
    assert!(err.ends_with(": gs://b/p/x.daf.zarr"), "{err}");
    assert!(
        err.contains("scheme (gs)") && !err.contains("s3cret"),
        "{err}"
    );
    assert_eq!(url_scheme("/data/http://x"), None);
    assert_eq!(url_scheme("s3+x.y-z://b"), Some("s3+x.y-z"));
    assert!(parse_source("./gs:/b").is_ok());
}

#[test]
fn a_url_query_string_is_split_off_before_the_grammar() {
    let signed = "https://h/p/x.daf.zarr.zip?X-Amz-Signature=s3cret&X-Amz-Date=1";
    assert_eq!(
        split_url_query(signed),
        (
            "https://h/p/x.daf.zarr.zip".to_string(),
            Some("X-Amz-Signature=s3cret&X-Amz-Date=1".to_string())
        )
    );
    assert!(matches!(
        parse_source(signed).unwrap(),
        SourceSpec::Zip {
            multi: false,
            group: None,
            ..
        }
    ));
    assert_eq!(
        parse_source("https://h/x.dafs.zarr.zip?sig=s3cret#/g1").unwrap(),
        SourceSpec::Zip {
            path: "https://h/x.dafs.zarr.zip".into(),
            layout: Family::Zarr,
            multi: true,
            group: Some("g1".into())
        }
    );
    let (url, query) = split_url_query("https://h/c/x.daf.zarr?sv=1&sig=s3cret");
    assert_eq!(
        (url.as_str(), query.as_deref()),
        ("https://h/c/x.daf.zarr", Some("sv=1&sig=s3cret"))
    );
    let err = parse_source("https://h/x.daf.zarr.zip?sig=s3cret#/g").unwrap_err();
    assert!(!err.to_string().contains("s3cret"), "{err}");
    // A local path keeps its '?'; an empty query is none.
    assert_eq!(split_url_query("a?b.daf.zarr").0, "a?b.daf.zarr");
    assert_eq!(split_url_query("http://h/x?").1, None);
}

#[test]
fn path_grammar() {
    assert_eq!(
        parse_source("a/x.dafs.zarr.zip#/g/h").unwrap(),
        SourceSpec::Zip {
            path: "a/x.dafs.zarr.zip".into(),
            layout: Family::Zarr,
            multi: true,
            group: Some("g/h".into())
        }
    );
    assert_eq!(
        parse_source("x.daf.zarr.zip").unwrap(),
        SourceSpec::Zip {
            path: "x.daf.zarr.zip".into(),
            layout: Family::Zarr,
            multi: false,
            group: None
        }
    );
    assert!(matches!(
        parse_source("x.dafs.zip").unwrap(),
        SourceSpec::Zip {
            layout: Family::Files,
            multi: true,
            group: None,
            ..
        }
    ));
    assert_eq!(
        parse_source("some/dir/").unwrap(),
        SourceSpec::Directory("some/dir".into())
    );
    for (bad_path, message) in [
        ("x.daf.zarr.zip#/g", "can't address a sub-daf"),
        ("x.dafs.zarr.zip#/", "empty group name"),
        ("x.dafs.zarr.zip#g", "expected '#/<group>'"),
        (
            "x.dafs.zarr.zip#/a/../b",
            "the group has a name that is '.' or '..'",
        ),
        ("x.dafs.zip#/a//b", "the group has an empty name"),
    ] {
        let err = parse_source(bad_path).unwrap_err().to_string();
        assert!(err.contains(message) && err.contains(bad_path), "{err}");
    }
}

#[test]
fn h5df_path_grammar() {
    assert_eq!(
        parse_source("d/x.h5df").unwrap(),
        SourceSpec::H5df {
            path: "d/x.h5df".into(),
            multi: false,
            group: None
        }
    );
    assert_eq!(
        parse_source("x.h5dfs").unwrap(),
        SourceSpec::H5df {
            path: "x.h5dfs".into(),
            multi: true,
            group: None
        }
    );
    assert_eq!(
        parse_source("x.h5dfs#/a/b/").unwrap(),
        SourceSpec::H5df {
            path: "x.h5dfs".into(),
            multi: true,
            group: Some("a/b".into())
        }
    );
    assert!(is_h5df("x.h5dfs#/g") && !is_h5df("x.daf.zarr.zip") && !is_h5df("https://h/x.h5df"));
    for (bad_path, message) in [
        ("x.h5dfs#/", "empty group name"),
        ("x.h5df#/g", "can't address a sub-daf"),
        ("x.h5dfs#g", "expected '#/<group>'"),
        (
            "x.h5dfs#/a/../b",
            "the group has a name that is '.' or '..'",
        ),
    ] {
        let err = parse_source(bad_path).unwrap_err().to_string();
        assert!(err.contains(message) && err.contains(bad_path), "{err}");
    }
}

#[test]
fn names_drop_the_format_suffix() {
    for (path, name) in [
        ("/d/pbmc.daf.zarr.zip", "pbmc"),
        ("pbmc.daf.zarr", "pbmc"),
        ("pbmc.daf", "pbmc"),
        ("pbmc", "pbmc"),
        ("m.dafs.zarr.zip", "m"),
    ] {
        assert_eq!(display_name(Path::new(path)), name);
    }
}

#[test]
fn opens_every_fixture_kind() {
    for (path, names) in [
        (format!("{VECTORS}/files_v1_0.daf"), vec!["files_v1_0"]),
        (format!("{VECTORS}/zarr_v2.daf.zarr"), vec!["zarr_v2"]),
        (format!("{VECTORS}/zarr_v2.daf.zarr.zip"), vec!["zarr_v2"]),
        (format!("{VECTORS}/zarr_v3.daf.zarr"), vec!["zarr_v3"]),
        (format!("{VECTORS}/zarr_v3.daf.zarr.zip"), vec!["zarr_v3"]),
        (
            format!("{VECTORS}/zipdaf_v1_0.daf.zip"),
            vec!["zipdaf_v1_0"],
        ),
        (format!("{VECTORS}/multi_v1_1.dafs.zip#/g1"), vec!["g1"]),
        (format!("{VECTORS}/multi_v1_1.dafs.zip"), vec!["g1"]),
    ] {
        let source = open_source(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let got: Vec<&str> = source.datasets.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(got, names, "{path}");
        assert_eq!(
            source.datasets[0].dataset.vectors["cell"].len(),
            4,
            "{path}"
        );
    }
}

/// Packs fixture directories into one ZIP, each under its group prefix (stored entries).
fn pack(archive: &Path, groups: &[(&str, &str)]) {
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/v3/pack_zip.py"
    ))
    .arg(archive);
    for (fixture, prefix) in groups {
        cmd.arg(format!("{VECTORS}/{fixture}={prefix}"));
    }
    assert!(cmd.status().unwrap().success());
}

#[test]
fn multi_archives_list_v3_and_v2_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("many.dafs.zarr.zip");
    pack(
        &archive,
        &[
            ("zarr_v3.daf.zarr", "g1/"),
            ("zarr_v3.daf.zarr", "deep/g2/"),
            ("zarr_v2.daf.zarr", "old/"),
        ],
    );
    let whole = open_source(archive.to_str().unwrap()).unwrap();
    let got: Vec<(&str, Option<u8>)> = whole
        .datasets
        .iter()
        .map(|d| (d.name.as_str(), d.dataset.zarr_format))
        .collect();
    assert_eq!(
        got,
        [("deep/g2", Some(3)), ("g1", Some(3)), ("old", Some(2))]
    );
    for ds in &whole.datasets {
        assert_eq!(ds.dataset.vectors["cell"].len(), 4, "{}", ds.name);
    }
    let one = open_source(&format!("{}#/deep/g2", archive.display())).unwrap();
    assert_eq!(one.datasets[0].name, "g2");
    assert_eq!(one.datasets[0].dataset.zarr_format, Some(3));
    // A v3 group without attributes.daf is no data set.
    let plain = tmp.path().join("plain.dafs.zarr.zip");
    pack(&plain, &[("zarr_v3.daf.zarr/vectors", "g/")]);
    let err = open_source(plain.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no data set found"), "{err}");
}

#[test]
fn error_cases_name_the_problem_and_the_path() {
    let err = open_source("/nonexistent/x.daf.zarr.zip")
        .unwrap_err()
        .to_string();
    assert_eq!(err, "source does not exist: /nonexistent/x.daf.zarr.zip");
    let tmp = tempfile::tempdir().unwrap();
    let err = open_source(tmp.path().to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("not a daf data set") && err.contains(tmp.path().to_str().unwrap()),
        "{err}"
    );
    let err = open_source(&format!("{VECTORS}/multi_v1_1.dafs.zip#/nope"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no group nope"), "{err}");
    let err = open_source(&format!("{VECTORS}/empty.zip"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a daf data set"), "{err}");
}
