//! S3-compatible sources (`s3://BUCKET/KEY…`: AWS S3, MinIO, Ceph RGW, R2, Wasabi, GCS's XML
//! API): where the bucket is (the endpoint, path-style or virtual-hosted addressing), which
//! credentials sign the requests, and the signing itself, Signature V4 by AWS's own signer
//! (`aws-sigv4`), in the `Authorization` header of every request.
//!
//! The configuration is the standard AWS one, read once at mount: `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`; else the profile `AWS_PROFILE` (or
//! `-o profile=`, else `default`) of `~/.aws/credentials` (`AWS_SHARED_CREDENTIALS_FILE`) and
//! `~/.aws/config` (`AWS_CONFIG_FILE`); the region from `-o region=`, `AWS_REGION`,
//! `AWS_DEFAULT_REGION` or the profile (else `us-east-1`); the endpoint from `-o endpoint=`,
//! `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL` or the profile's `endpoint_url` (else AWS's
//! regional endpoint). `-o no_sign` sends no credential (a public bucket).
//!
//! The secret key and the session token are kept in `aws_credential_types::Credentials`, whose
//! `Debug` redacts them; nothing here logs them or puts them in an error.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;

use crate::stores::http::escape_key;

/// How the bucket is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// `ENDPOINT/BUCKET/KEY` (the default with an endpoint of one's own).
    Path,
    /// `https://BUCKET.HOST/KEY` (the default on AWS, for a bucket name without dots).
    Virtual,
}

/// The `-o` options of an S3 source (none of them secret).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Options {
    /// `-o endpoint=URL`.
    pub endpoint: Option<String>,
    /// `-o region=NAME`.
    pub region: Option<String>,
    /// `-o profile=NAME`.
    pub profile: Option<String>,
    /// `-o addressing=path|virtual`.
    pub addressing: Option<Addressing>,
    /// `-o no_sign`: anonymous requests (a public bucket).
    pub no_sign: bool,
}

/// Parses `-o addressing=`.
pub fn parse_addressing(value: &str) -> Option<Addressing> {
    match value {
        "path" => Some(Addressing::Path),
        "virtual" => Some(Addressing::Virtual),
        _ => None,
    }
}

/// Whether `arg` is an `s3://` URL.
pub fn is_s3(arg: &str) -> bool {
    arg.get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("s3://"))
}

/// An S3 source resolved: the HTTP URL of the source, its bucket's URL and its key prefix, and
/// the signer of its requests (`None`: anonymous).
#[derive(Debug)]
pub struct S3Source {
    /// The source as an HTTP(S) URL (with its `#/GROUP`, if any).
    pub url: String,
    /// The bucket's URL (`ENDPOINT/BUCKET` or `https://BUCKET.HOST`), no trailing `/`.
    pub bucket_url: String,
    /// The source's key in the bucket (no leading or trailing `/`), without `#/GROUP`.
    pub key: String,
    /// Signs each request; `None` with `no_sign`.
    pub signer: Option<Signer>,
}

/// Where the configuration comes from: the environment and the home directory (a closure and a
/// path, so that tests give their own).
pub struct Config<'a> {
    /// An environment variable's value.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The user's home directory (`~/.aws/…`).
    pub home: Option<PathBuf>,
}

impl Config<'_> {
    /// The process's environment and `$HOME`.
    pub fn process() -> Config<'static> {
        Config {
            env: &|name| std::env::var(name).ok().filter(|v| !v.is_empty()),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.is_empty())
    }

    fn file(&self, variable: &str, default: &str) -> Option<PathBuf> {
        self.var(variable)
            .map(PathBuf::from)
            .or_else(|| self.home.as_ref().map(|h| h.join(default)))
    }
}

/// One section of an INI file (`None` when the file or the section is missing).
fn section(path: Option<&Path>, name: &str) -> Result<Option<ini::Properties>, String> {
    let Some(path) = path.filter(|p| p.is_file()) else {
        return Ok(None);
    };
    // The file's text is never shown: it holds secrets.
    let file = ini::Ini::load_from_file(path)
        .map_err(|_| format!("{}: not a valid AWS configuration file", path.display()))?;
    Ok(file.section(Some(name)).cloned())
}

/// Resolves `s3://BUCKET/KEY[#/GROUP]` with these options and this configuration.
pub fn resolve(source: &str, options: &S3Options, config: &Config) -> Result<S3Source, String> {
    let rest = source
        .get(5..)
        .filter(|_| is_s3(source))
        .ok_or("not an s3:// URL")?;
    if rest.contains('?') {
        return Err(
            "an s3:// source takes no query string (credentials come from the AWS \
                    configuration)"
                .into(),
        );
    }
    let (path, fragment) = match rest.find('#') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    let key = key.trim_matches('/');
    let valid_bucket = !bucket.is_empty()
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b));
    if !valid_bucket {
        return Err(format!("{bucket:?} is not a bucket name"));
    }
    if key.is_empty() {
        return Err("no data set named after the bucket (s3://BUCKET/PATH/x.daf.zarr)".into());
    }
    let profile = options
        .profile
        .clone()
        .or_else(|| config.var("AWS_PROFILE"))
        .unwrap_or_else(|| "default".into());
    let credentials_file = config.file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    let config_file = config.file("AWS_CONFIG_FILE", ".aws/config");
    let config_section = if profile == "default" {
        "default".to_string()
    } else {
        format!("profile {profile}")
    };
    let profile_config = section(config_file.as_deref(), &config_section)?;
    let from_config = |key: &str| {
        profile_config
            .as_ref()
            .and_then(|s| s.get(key))
            .map(str::to_string)
            .filter(|v| !v.is_empty())
    };
    let region = options
        .region
        .clone()
        .or_else(|| config.var("AWS_REGION"))
        .or_else(|| config.var("AWS_DEFAULT_REGION"))
        .or_else(|| from_config("region"))
        .unwrap_or_else(|| "us-east-1".into());
    let endpoint = options
        .endpoint
        .clone()
        .or_else(|| config.var("AWS_ENDPOINT_URL_S3"))
        .or_else(|| config.var("AWS_ENDPOINT_URL"))
        .or_else(|| from_config("endpoint_url"));
    let addressing = options.addressing.unwrap_or(match endpoint {
        Some(_) => Addressing::Path,
        None if bucket.contains('.') => Addressing::Path,
        None => Addressing::Virtual,
    });
    let endpoint = endpoint
        .map(|e| e.trim_end_matches('/').to_string())
        .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
    let Some((scheme, host)) = endpoint.split_once("://") else {
        return Err(format!(
            "the endpoint {endpoint} is not an http:// or https:// URL"
        ));
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return Err(format!(
            "the endpoint {endpoint} is not an http:// or https:// URL"
        ));
    }
    let bucket_url = match addressing {
        Addressing::Path => format!("{endpoint}/{}", escape_key(bucket)),
        Addressing::Virtual => format!("{scheme}://{bucket}.{host}"),
    };
    let signer = if options.no_sign {
        None
    } else {
        let credentials = match (
            config.var("AWS_ACCESS_KEY_ID"),
            config.var("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Some(id), Some(secret)) => Some((id, secret, config.var("AWS_SESSION_TOKEN"))),
            _ => profile_credentials(credentials_file.as_deref(), &profile, &from_config)?,
        };
        let Some((id, secret, token)) = credentials else {
            return Err(format!(
                "no AWS credentials: neither AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY nor \
                 profile {profile:?} in ~/.aws/credentials or ~/.aws/config (-o no_sign reads a \
                 public bucket without them)"
            ));
        };
        Some(Signer {
            credentials: Credentials::new(id, secret, token, None, "daf-mount"),
            region,
        })
    };
    Ok(S3Source {
        url: format!("{bucket_url}/{}{fragment}", escape_key(key)),
        bucket_url,
        key: key.to_string(),
        signer,
    })
}

type Keys = Option<(String, String, Option<String>)>;

/// The credentials of `profile` in the credentials file, else in the config file's section.
fn profile_credentials(
    file: Option<&Path>,
    profile: &str,
    from_config: &dyn Fn(&str) -> Option<String>,
) -> Result<Keys, String> {
    let found = section(file, profile)?;
    let get = |key: &str| {
        found
            .as_ref()
            .and_then(|s| s.get(key))
            .map(str::to_string)
            .filter(|v| !v.is_empty())
            .or_else(|| from_config(key))
    };
    Ok(
        match (get("aws_access_key_id"), get("aws_secret_access_key")) {
            (Some(id), Some(secret)) => Some((id, secret, get("aws_session_token"))),
            _ => None,
        },
    )
}

/// Signs requests with one set of credentials for one region (service `s3`).
pub struct Signer {
    credentials: Credentials,
    region: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({})", self.region)
    }
}

impl Signer {
    /// Adds the Signature V4 headers (`Authorization`, `x-amz-date`, `x-amz-content-sha256`,
    /// `x-amz-security-token`) to `request`, which has an empty body. Only `host` and those are
    /// signed, so the `Range` and the mount's own headers may be added before or after.
    pub fn sign(&self, request: &mut ureq::http::Request<()>) -> Result<(), String> {
        let mut settings = SigningSettings::default();
        // As S3 wants them: the path as given (no double encoding, no normalisation), and the
        // payload's hash in a header.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| format!("signing: {e}"))?
            .into();
        let uri = request.uri().to_string();
        let signable = SignableRequest::new(
            request.method().as_str(),
            uri,
            std::iter::empty(),
            SignableBody::Bytes(&[]),
        )
        .map_err(|e| format!("signing: {e}"))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| format!("signing: {e}"))?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

/// The `Code` and `Message` of an S3 error document (`<Error><Code>…</Code>…`), if `body` is one.
pub fn error_of(body: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(body).ok()?;
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&format!("</{name}>"))?;
        Some(text[start..end].trim().to_string())
    };
    if !text.contains("<Error>") {
        return None;
    }
    let code = element("Code")?;
    // Only printable text of a sensible length goes into a line.
    let message: String = element("Message")
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    let code = code
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(64)
        .collect();
    Some((code, message))
}

/// Whether an S3 error code says the credentials (or their absence) were refused.
pub fn is_credential_refusal(code: &str) -> bool {
    matches!(
        code,
        "AccessDenied"
            | "AllAccessDisabled"
            | "AuthorizationHeaderMalformed"
            | "ExpiredToken"
            | "InvalidAccessKeyId"
            | "InvalidClientTokenId"
            | "InvalidToken"
            | "RequestTimeTooSkewed"
            | "SignatureDoesNotMatch"
            | "TokenRefreshRequired"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with_env<'a>(vars: &'a HashMap<&str, &str>) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.get(name).map(|v| v.to_string())
    }

    #[test]
    fn addressing_follows_the_endpoint_and_the_bucket() {
        let vars = HashMap::from([
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s3cret"),
            ("AWS_REGION", "eu-west-3"),
        ]);
        let env = with_env(&vars);
        let config = Config {
            env: &env,
            home: None,
        };
        let aws = resolve(
            "s3://lab/a b/x.dafs.zarr.zip#/g1",
            &S3Options::default(),
            &config,
        )
        .unwrap();
        assert_eq!(aws.bucket_url, "https://lab.s3.eu-west-3.amazonaws.com");
        assert_eq!(
            aws.url,
            "https://lab.s3.eu-west-3.amazonaws.com/a%20b/x.dafs.zarr.zip#/g1"
        );
        assert_eq!(aws.key, "a b/x.dafs.zarr.zip");
        let dotted = resolve("s3://lab.data/x.daf.zarr", &S3Options::default(), &config).unwrap();
        assert_eq!(
            dotted.bucket_url,
            "https://s3.eu-west-3.amazonaws.com/lab.data"
        );
        let own = S3Options {
            endpoint: Some("http://127.0.0.1:9000/".into()),
            ..S3Options::default()
        };
        let minio = resolve("s3://lab/x.daf.zarr/", &own, &config).unwrap();
        assert_eq!(minio.url, "http://127.0.0.1:9000/lab/x.daf.zarr");
        let virtual_own = S3Options {
            addressing: Some(Addressing::Virtual),
            ..own
        };
        let hosted = resolve("s3://lab/x.daf.zarr", &virtual_own, &config).unwrap();
        assert_eq!(hosted.url, "http://lab.127.0.0.1:9000/x.daf.zarr");
        assert!(!format!("{hosted:?}").contains("s3cret"));
        assert!(resolve("s3://Lab/x", &S3Options::default(), &config).is_err());
        assert!(resolve("s3://lab", &S3Options::default(), &config).is_err());
    }

    #[test]
    fn credentials_come_from_the_environment_then_the_profile() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n\
             [lab]\naws_access_key_id = LAB\naws_secret_access_key = labsecret\n\
             aws_session_token = labtoken\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[profile lab]\nregion = ap-south-1\nendpoint_url = http://127.0.0.1:1\n",
        )
        .unwrap();
        let vars = HashMap::from([("AWS_PROFILE", "lab")]);
        let env = with_env(&vars);
        let config = Config {
            env: &env,
            home: Some(home.path().into()),
        };
        let lab = resolve("s3://b/x.daf.zarr", &S3Options::default(), &config).unwrap();
        assert_eq!(lab.url, "http://127.0.0.1:1/b/x.daf.zarr");
        let signer = lab.signer.unwrap();
        assert_eq!(signer.region, "ap-south-1");
        assert_eq!(signer.credentials.access_key_id(), "LAB");
        assert_eq!(signer.credentials.session_token(), Some("labtoken"));
        assert!(!format!("{signer:?}").contains("labsecret"));
        let none = HashMap::new();
        let env = with_env(&none);
        let config = Config {
            env: &env,
            home: Some(home.path().into()),
        };
        let default = resolve("s3://b/x.daf.zarr", &S3Options::default(), &config).unwrap();
        assert_eq!(default.signer.unwrap().credentials.access_key_id(), "DEF");
        let anonymous = S3Options {
            no_sign: true,
            ..S3Options::default()
        };
        assert!(resolve("s3://b/x.daf.zarr", &anonymous, &config)
            .unwrap()
            .signer
            .is_none());
        let config = Config {
            env: &env,
            home: None,
        };
        let err = resolve("s3://b/x.daf.zarr", &S3Options::default(), &config).unwrap_err();
        assert!(err.contains("no AWS credentials"), "{err}");
    }

    #[test]
    fn a_signed_request_carries_the_signature_and_the_token_only_in_headers() {
        let signer = Signer {
            credentials: Credentials::new("AKID", "s3cret", Some("t0ken".into()), None, "t"),
            region: "us-east-1".into(),
        };
        let mut request = ureq::http::Request::builder()
            .method("GET")
            .uri("http://127.0.0.1:9000/b/x.daf.zarr/.zmetadata?list-type=2&prefix=a%2F")
            .body(())
            .unwrap();
        signer.sign(&mut request).unwrap();
        let header = |n: &str| {
            request
                .headers()
                .get(n)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        };
        let auth = header("authorization");
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/s3/aws4_request"), "{auth}");
        assert!(!auth.contains("s3cret"));
        assert_eq!(header("x-amz-security-token"), "t0ken");
        assert_eq!(
            header("x-amz-content-sha256"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(!request.uri().to_string().contains("t0ken"));
    }

    #[test]
    fn s3_errors_are_read_from_their_document() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>ExpiredToken</Code>\
                     <Message>The provided token has expired.</Message></Error>";
        assert_eq!(
            error_of(body),
            Some((
                "ExpiredToken".into(),
                "The provided token has expired.".into()
            ))
        );
        assert!(is_credential_refusal("SignatureDoesNotMatch"));
        assert_eq!(error_of(b"<html>no</html>"), None);
    }
}
