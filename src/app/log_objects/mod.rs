//! Logs in the object store (issue 42, `serve --log-store s3://BUCKET/PREFIX`): the one step
//! an upload takes to put its chunks there ([`place`]), and the sweeper that removes objects
//! no report refers to. An upload records its object prefix in PostgreSQL before it writes the
//! first object and the transaction that stores its report takes the record back, so whatever
//! stops an upload half way (the store or the database down, a crash, a duplicate), its
//! objects are on the sweep list and go once the grace period has passed; retention and
//! deleted reports queue theirs in the same transaction that forgets them (migration 0039).
//! A report's script goes to the store too, under a prefix of its own (migration 0050), read
//! back by [`read_script`].
//! Moving stored logs between PostgreSQL and the store (`db move-logs`) is in [`moving`].

pub mod moving;

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::Error;
use crate::storage::log_objects as store;
use crate::storage::objects::{LogObjects, StoreError};
use crate::storage::reports::{
    LogPlace, NewReport, ScriptPlace, StoredScript, object_key, script_key,
};
use crate::storage::{Db, DbError};

/// A fresh object prefix under `kind` (`logs`, `scripts`): `{kind}/` and 128 random bits.
fn fresh_prefix(kind: &str) -> Result<String, Error> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(|e| Error::Internal(anyhow::anyhow!("random source: {e}")))?;
    Ok(format!("{kind}/{}/", hex::encode(id)))
}

/// A fresh object prefix for one log.
fn new_prefix() -> Result<String, Error> {
    fresh_prefix("logs")
}

/// Puts `new`'s chunks and script in the object store when the server has one (else leaves
/// them for their rows), and records where in `new.log_place` and `new.script_place`. Each
/// prefix is on the sweep list, due after the store's grace period, before its first object
/// is written; [`NewReport`]'s insert takes it back. A store that fails gives the error (503
/// when it is unreachable) and leaves what was written to the sweeper.
#[tracing::instrument(name = "log_objects::place", skip_all, fields(chunks = new.log.len()))]
pub async fn place(db: &Db, new: &mut NewReport) -> Result<(), Error> {
    let Some(objects) = db.log_store() else {
        return Ok(());
    };
    if !new.log.is_empty() {
        let prefix = new_prefix()?;
        store::record_pending(db.pool(), &prefix, objects.grace()).await?;
        let written = put_chunks(
            objects,
            &prefix,
            new.log.iter().map(|c| (c.seq, c.data.clone())),
        )
        .await;
        let place = LogPlace::Objects {
            prefix,
            sha256: written.as_ref().cloned().unwrap_or_default(),
        };
        if written.is_err() {
            abandon(db, &place).await;
        }
        written?;
        new.log_place = place;
    }
    if let Some(script) = &new.script {
        let prefix = fresh_prefix("scripts")?;
        store::record_pending(db.pool(), &prefix, objects.grace()).await?;
        let sha256 = Sha256::digest(script.as_bytes()).to_vec();
        let written = objects
            .put(&script_key(&prefix), script.as_bytes().to_vec())
            .await;
        let place = ScriptPlace::Objects { prefix, sha256 };
        if let Err(e) = written {
            abandon_script(db, &place).await;
            abandon(db, &new.log_place).await;
            return Err(DbError::from(e).into());
        }
        new.script_place = place;
    }
    Ok(())
}

/// A stored report's script text: the row's, or the object's, checked against its recorded
/// SHA-256 (a store that cannot give it back, or gives other bytes, is an error naming it).
pub async fn read_script(db: &Db, script: StoredScript) -> Result<String, Error> {
    match script {
        StoredScript::Row(text) => Ok(text),
        StoredScript::Object { prefix, sha256 } => {
            let objects = db.require_log_store()?;
            let key = script_key(&prefix);
            let bytes = objects.get(&key).await.map_err(DbError::from)?;
            if Sha256::digest(&bytes)[..] != sha256[..] {
                return Err(DbError::from(StoreError::Corrupt {
                    url: objects.url().to_owned(),
                    key,
                })
                .into());
            }
            String::from_utf8(bytes).map_err(|_| {
                Error::Internal(anyhow::anyhow!("the script object {key} is not UTF-8"))
            })
        }
    }
}

/// Writes the chunks, a few at a time, and returns their SHA-256 in order.
async fn put_chunks(
    objects: &std::sync::Arc<LogObjects>,
    prefix: &str,
    chunks: impl Iterator<Item = (i32, Vec<u8>)>,
) -> Result<Vec<Vec<u8>>, Error> {
    let mut hashes = Vec::new();
    let mut running = tokio::task::JoinSet::new();
    for (seq, data) in chunks {
        hashes.push(Sha256::digest(&data).to_vec());
        if running.len() >= 4
            && let Some(done) = running.join_next().await
        {
            done.map_err(|e| Error::Internal(e.into()))??;
        }
        let (objects, key) = (objects.clone(), object_key(prefix, seq));
        running.spawn(async move { objects.put(&key, data).await.map_err(DbError::from) });
    }
    while let Some(done) = running.join_next().await {
        done.map_err(|e| Error::Internal(e.into()))??;
    }
    Ok(hashes)
}

/// After an upload whose objects were written failed to store its report: its objects are
/// due for the sweeper now rather than after the grace period (best effort: when the
/// database is down too, the record made before the first object was written stands).
pub async fn abandon(db: &Db, place: &LogPlace) {
    if let LogPlace::Objects { prefix, .. } = place {
        abandon_prefix(db, prefix).await;
    }
}

/// [`abandon`] for a script written to the store.
pub async fn abandon_script(db: &Db, place: &ScriptPlace) {
    if let ScriptPlace::Objects { prefix, .. } = place {
        abandon_prefix(db, prefix).await;
    }
}

async fn abandon_prefix(db: &Db, prefix: &str) {
    if let Err(e) = store::record_pending(db.pool(), prefix, Duration::ZERO).await {
        tracing::debug!(error = %e, prefix, "marking an upload's objects for the sweeper");
    }
}

/// One sweep: removes the objects of up to `limit` due prefixes and their records; returns
/// how many prefixes it removed. A store that fails ends the sweep (the records stay due).
pub async fn sweep_once(db: &Db, limit: i64) -> Result<usize, Error> {
    let objects = db.require_log_store()?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let due = store::lock_due(&mut tx, limit).await?;
    let mut removed = 0;
    let mut failed = None;
    for prefix in &due {
        match objects.delete_under(prefix).await {
            Ok(n) => {
                tracing::debug!(prefix, objects = n, "swept");
                store::swept(&mut tx, prefix).await?;
                removed += 1;
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    tx.commit().await.map_err(DbError::from)?;
    match failed {
        Some(e) => Err(DbError::from(e).into()),
        None => Ok(removed),
    }
}

/// Sweeps until nothing is due.
pub async fn sweep_all(db: &Db) -> Result<usize, Error> {
    let mut total = 0;
    loop {
        let n = sweep_once(db, 100).await?;
        total += n;
        if n < 100 {
            return Ok(total);
        }
    }
}

/// Runs the sweeper every `interval` (every replica runs one: due records are locked with
/// `SKIP LOCKED`, so two never sweep the same prefix).
pub fn spawn_sweeper(db: Db, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while db.ping().await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        loop {
            match sweep_all(&db).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(prefixes = n, "removed log objects no report refers to"),
                Err(e) => {
                    tracing::warn!(error = %e, "sweeping the log store failed; trying again later")
                }
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// Checks the store at start: it answers, the bucket exists, the credentials may write, read
/// and delete. The error names what failed.
pub async fn check(objects: &LogObjects) -> Result<(), Error> {
    objects.check().await.map_err(|e| DbError::from(e).into())
}
