//! The S3-compatible object store that holds raw logs when `serve --log-store s3://BUCKET/PREFIX`
//! is given (issue 42): a company's CI writes tens of GB of logs a day, written once and read
//! rarely, which PostgreSQL's backups, vacuum and replicas should not carry. PostgreSQL keeps
//! the report, its index and the chunk map; this module only moves bytes, through the
//! `object_store` crate, and says in one error type what failed (unreachable, refused
//! credentials, a missing object), naming the store and the operation.
//!
//! Endpoint, region and credentials come from the usual AWS environment variables
//! (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_ALLOW_HTTP=true` for a plain-http endpoint).

use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

/// What went wrong with the log store. Each message names the store and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The `--log-store` value or the AWS settings are not usable.
    #[error("log store settings: {0}")]
    Config(String),
    /// The store did not answer in time, refused the connection, or answered with a server
    /// error: worth retrying later (503 with `Retry-After`).
    #[error("the log store {url} is unreachable ({op} {key}): {detail}")]
    Unreachable {
        url: String,
        op: &'static str,
        key: String,
        detail: String,
    },
    /// The store refused the credentials or the access (HTTP 401/403).
    #[error(
        "the log store {url} refused the credentials ({op} {key}): {detail}; check \
         AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION"
    )]
    Denied {
        url: String,
        op: &'static str,
        key: String,
        detail: String,
    },
    /// The object (or the bucket) does not exist.
    #[error("the log store {url} has no {key} ({op}): {detail}")]
    Missing {
        url: String,
        op: &'static str,
        key: String,
        detail: String,
    },
    /// An object's bytes do not match the hash the chunk map recorded.
    #[error("the log store {url} returned {key} with a different SHA-256 than was stored")]
    Corrupt { url: String, key: String },
    /// A log is in the object store, but this process runs without `--log-store`.
    #[error(
        "this log is kept in an object store, but the server runs without --log-store \
         (GPU_TRIAGE_LOG_STORE)"
    )]
    NotConfigured,
    /// An upload took longer than the sweeper's grace period, and its objects were removed as
    /// those of an upload that never committed: sending it again stores it.
    #[error("the upload took longer than the log store's grace period; send it again")]
    Expired,
}

impl StoreError {
    /// Whether trying again later may succeed (the edges answer 503 with `Retry-After`).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unreachable { .. } | StoreError::Expired)
    }
}

/// An opened log store: the bucket and the prefix every key lives under.
#[derive(Debug)]
pub struct LogObjects {
    store: AmazonS3,
    root: Path,
    url: String,
    grace: Duration,
}

/// How long an upload's objects may wait for its commit, by default: far longer than any
/// upload takes.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);

/// How long one request to the store may take, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl LogObjects {
    /// Opens `url` (`s3://BUCKET` or `s3://BUCKET/PREFIX`) with the AWS settings of the
    /// environment. Each request may take `timeout` (connecting: at most 5 s of it) and is
    /// retried twice within `2 × timeout`. Nothing is sent yet: [`LogObjects::check`] does.
    pub fn open(url: &str, timeout: Duration) -> Result<LogObjects, StoreError> {
        LogObjects::open_with(url, timeout, &[])
    }

    /// [`LogObjects::open`] with `settings` (`("aws_endpoint_url", "http://...")`, any key the
    /// `AWS_*` variables set, in lowercase) taking precedence over the environment's.
    pub fn open_with(
        url: &str,
        timeout: Duration,
        settings: &[(&str, &str)],
    ) -> Result<LogObjects, StoreError> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| {
            StoreError::Config(format!(
                "--log-store must look like s3://BUCKET/PREFIX, got {url:?}"
            ))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(StoreError::Config(format!(
                "no bucket in --log-store {url:?}"
            )));
        }
        let root = Path::parse(prefix.trim_matches('/'))
            .map_err(|e| StoreError::Config(format!("the prefix of {url:?}: {e}")))?;
        install_tls_provider();
        let secs = |d: Duration| format!("{}ms", d.as_millis().max(1));
        let mut builder = AmazonS3Builder::from_env();
        for (key, value) in settings {
            let key: AmazonS3ConfigKey = key
                .parse()
                .map_err(|e| StoreError::Config(format!("{key}: {e}")))?;
            builder = builder.with_config(key, *value);
        }
        let store = builder
            .with_bucket_name(bucket)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                secs(timeout),
            )
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                secs(timeout.min(Duration::from_secs(5))),
            )
            .with_retry(RetryConfig {
                max_retries: 2,
                retry_timeout: timeout * 2,
                ..RetryConfig::default()
            })
            .build()
            .map_err(|e| StoreError::Config(format!("{url}: {e}")))?;
        Ok(LogObjects {
            store,
            root,
            url: url.trim_end_matches('/').to_owned(),
            grace: DEFAULT_GRACE,
        })
    }

    /// The same store, whose uploads' objects may wait `grace` for their commit before the
    /// sweeper removes them.
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> LogObjects {
        self.grace = grace;
        self
    }

    /// How long objects written for an upload may wait for its commit.
    #[must_use]
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The store's URL as configured, for messages.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, key: &str) -> Path {
        let mut path = self.root.clone();
        for part in key.split('/').filter(|p| !p.is_empty()) {
            path = path.clone().join(part);
        }
        path
    }

    fn error(&self, op: &'static str, key: &str, e: object_store::Error) -> StoreError {
        let (url, key) = (self.url.clone(), key.to_owned());
        let detail = error_chain(&e);
        match e {
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => StoreError::Denied {
                url,
                op,
                key,
                detail,
            },
            object_store::Error::NotFound { .. } => StoreError::Missing {
                url,
                op,
                key,
                detail,
            },
            _ => StoreError::Unreachable {
                url,
                op,
                key,
                detail,
            },
        }
    }

    /// Writes, reads back and deletes a small probe object: the store answers, the bucket
    /// exists and the credentials may write, read and delete.
    pub async fn check(&self) -> Result<(), StoreError> {
        let mut name = [0u8; 8];
        getrandom::fill(&mut name).map_err(|e| StoreError::Config(e.to_string()))?;
        let key = format!("probe/{}", hex::encode(name));
        self.put(&key, b"gpu-triage probe".to_vec()).await?;
        let back = self.get(&key).await?;
        self.delete(&key).await?;
        if back != b"gpu-triage probe" {
            return Err(StoreError::Corrupt {
                url: self.url.clone(),
                key,
            });
        }
        Ok(())
    }

    /// Stores `bytes` as `key` (relative to the prefix), replacing any object there.
    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.store
            .put(&self.path(key), PutPayload::from(bytes))
            .await
            .map_err(|e| self.error("put", key, e))?;
        Ok(())
    }

    /// The bytes of object `key`.
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        let got = self
            .store
            .get(&self.path(key))
            .await
            .map_err(|e| self.error("get", key, e))?;
        let bytes = got.bytes().await.map_err(|e| self.error("get", key, e))?;
        Ok(bytes.to_vec())
    }

    /// Deletes object `key` (deleting one that is not there is no error).
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", key, e)),
        }
    }

    /// The keys (relative to the prefix) of the objects directly under `dir` (`logs/ab12/`).
    pub async fn list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        let at = self.path(dir);
        let listed = self
            .store
            .list_with_delimiter(Some(&at))
            .await
            .map_err(|e| self.error("list", dir, e))?;
        let dir = dir.trim_matches('/');
        Ok(listed
            .objects
            .iter()
            // A store with directories (SeaweedFS) may list an emptied one as an entry of itself.
            .filter(|o| o.location != at)
            .filter_map(|o| o.location.filename().map(|f| format!("{dir}/{f}")))
            .collect())
    }

    /// The sub-directories directly under `dir`, as keys ending in `/`.
    pub async fn list_dirs(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        let listed = self
            .store
            .list_with_delimiter(Some(&self.path(dir)))
            .await
            .map_err(|e| self.error("list", dir, e))?;
        let dir = dir.trim_matches('/');
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(|f| format!("{dir}/{f}/")))
            .collect())
    }

    /// Deletes every object directly under `dir`; returns how many there were.
    pub async fn delete_under(&self, dir: &str) -> Result<usize, StoreError> {
        let keys = self.list(dir).await?;
        for key in &keys {
            self.delete(key).await?;
        }
        Ok(keys.len())
    }
}

/// An error with its causes, `: `-separated (the store's own words are at the end).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// Installs rustls' ring provider as the process default, which the store's HTTP client
/// (reqwest without a provider of its own) needs; a provider installed before is kept.
fn install_tls_provider() {
    // Err only when one is installed already, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_are_checked() {
        for bad in ["", "s3:/b", "http://x/y", "s3://", "s3:///prefix"] {
            assert!(
                matches!(
                    LogObjects::open(bad, DEFAULT_TIMEOUT),
                    Err(StoreError::Config(_))
                ),
                "{bad}"
            );
        }
        let ok = LogObjects::open("s3://bucket/some/prefix/", DEFAULT_TIMEOUT).expect("valid");
        assert_eq!(ok.url(), "s3://bucket/some/prefix");
        assert_eq!(ok.path("logs/ab/0").as_ref(), "some/prefix/logs/ab/0");
        let bare = LogObjects::open("s3://bucket", DEFAULT_TIMEOUT).expect("valid");
        assert_eq!(bare.path("logs/ab/0").as_ref(), "logs/ab/0");
    }
}
