//! `gpu-triage db move-logs`: moves stored logs between PostgreSQL rows and the object store,
//! one report at a time, so an interrupted run loses nothing and the next run goes on where it
//! stopped (a report is moved by one transaction or not at all). Every chunk is verified by its
//! SHA-256 on the way: read back from the store after writing it, or checked against the chunk
//! map's hash before its bytes go back into a row. Reproduction scripts move the same way
//! (migration 0050), each verified by its SHA-256. The objects a move leaves behind (the old
//! copies, or a half-written report of an interrupted run) are the sweeper's.

use sha2::{Digest, Sha256};

use super::{Error, abandon_script, fresh_prefix, new_prefix, put_chunks, read_script, sweep_all};
use crate::storage::log_objects::{self as store, Side};
use crate::storage::objects::StoreError;
use crate::storage::reports::{self, ScriptPlace, StoredScript, object_key, script_key};
use crate::storage::{Db, DbError};

/// Where the logs go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Into the object store the database handle has (`--to s3://...`).
    Store,
    /// Back into PostgreSQL rows (`--to postgres`), read from the handle's object store.
    Database,
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Reports whose logs were moved.
    pub reports: u64,
    /// Chunks moved, each verified.
    pub chunks: u64,
    /// Reproduction scripts moved, each verified.
    pub scripts: u64,
    /// Reports passed over because their log changed meanwhile (removed by retention).
    pub skipped: u64,
    /// Object prefixes the sweep removed at the end.
    pub swept: usize,
}

/// Moves every log not yet at `to`, reporting each report moved to `progress`.
pub async fn move_logs(
    db: &Db,
    to: Destination,
    mut progress: impl FnMut(i64, &Moved),
) -> Result<Moved, Error> {
    db.require_log_store()?;
    let from = match to {
        Destination::Store => Side::Database,
        Destination::Database => Side::Store,
    };
    let mut moved = Moved::default();
    let mut after = 0;
    loop {
        let ids = store::reports_on(db.pool(), from, after, 100).await?;
        let Some(&last) = ids.last() else { break };
        for id in ids {
            let chunks = match to {
                Destination::Store => to_store(db, id).await?,
                Destination::Database => to_rows(db, id).await?,
            };
            match chunks {
                Some(n) => {
                    moved.reports += 1;
                    moved.chunks += n;
                }
                None => moved.skipped += 1,
            }
            progress(id, &moved);
        }
        after = last;
    }
    let mut after = 0;
    loop {
        let ids = reports::scripts_on(db.pool(), from, after, 100).await?;
        let Some(&last) = ids.last() else { break };
        for id in ids {
            let done = match to {
                Destination::Store => script_to_store(db, id).await?,
                Destination::Database => script_to_row(db, id).await?,
            };
            if done {
                moved.scripts += 1;
            } else {
                moved.skipped += 1;
            }
            progress(id, &moved);
        }
        after = last;
    }
    moved.swept = sweep_all(db).await?;
    Ok(moved)
}

/// Moves report `id`'s chunks from their rows to the store; the number moved, or `None` when
/// its log changed meanwhile.
async fn to_store(db: &Db, id: i64) -> Result<Option<u64>, Error> {
    let objects = db.require_log_store()?;
    let chunks = store::chunks_of(db.pool(), id).await?;
    let mut rows = Vec::with_capacity(chunks.len());
    for c in chunks {
        let Some(data) = c.data else {
            return Ok(None); // Half in the store: not written by this program.
        };
        if let Some(want) = &c.sha256
            && want[..] != Sha256::digest(&data)[..]
        {
            return Err(corrupt_row(id, c.seq));
        }
        rows.push((c.seq, data));
    }
    let prefix = new_prefix()?;
    store::record_pending(db.pool(), &prefix, objects.grace()).await?;
    let hashes = put_chunks(objects, &prefix, rows.iter().cloned()).await?;
    let mut map = Vec::with_capacity(rows.len());
    for ((seq, data), sha) in rows.iter().zip(hashes) {
        let key = object_key(&prefix, *seq);
        let back = objects.get(&key).await.map_err(DbError::from)?;
        if Sha256::digest(&back)[..] != sha[..] {
            return Err(DbError::from(StoreError::Corrupt {
                url: objects.url().to_owned(),
                key,
            })
            .into());
        }
        map.push((*seq, sha, i64::try_from(data.len()).unwrap_or(i64::MAX)));
    }
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    if !store::point_to_objects(&mut tx, id, &prefix, &map).await? {
        tx.rollback().await.map_err(DbError::from)?;
        let place = crate::storage::reports::LogPlace::Objects {
            prefix,
            sha256: Vec::new(),
        };
        super::abandon(db, &place).await;
        return Ok(None);
    }
    tx.commit().await.map_err(DbError::from)?;
    Ok(Some(map.len() as u64))
}

/// Moves report `id`'s chunks from the store back into their rows; the number moved, or
/// `None` when its log changed meanwhile.
async fn to_rows(db: &Db, id: i64) -> Result<Option<u64>, Error> {
    let objects = db.require_log_store()?;
    let chunks = store::chunks_of(db.pool(), id).await?;
    let Some(prefix) = chunks.first().and_then(|c| c.object_prefix.clone()) else {
        return Ok(None);
    };
    let mut rows = Vec::with_capacity(chunks.len());
    for c in chunks {
        if c.object_prefix.as_deref() != Some(prefix.as_str()) {
            return Ok(None); // Partly in rows: not written by this program.
        }
        let key = object_key(&prefix, c.seq);
        let data = objects.get(&key).await.map_err(DbError::from)?;
        if c.sha256.as_deref() != Some(&Sha256::digest(&data)[..]) {
            return Err(DbError::from(StoreError::Corrupt {
                url: objects.url().to_owned(),
                key,
            })
            .into());
        }
        rows.push((c.seq, data));
    }
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    if !store::point_to_rows(&mut tx, id, &prefix, &rows).await? {
        tx.rollback().await.map_err(DbError::from)?;
        return Ok(None);
    }
    tx.commit().await.map_err(DbError::from)?;
    Ok(Some(rows.len() as u64))
}

/// Moves report `id`'s script from its row to the store, read back and verified; `false` when
/// it changed meanwhile (the report was removed, or another run moved it).
async fn script_to_store(db: &Db, id: i64) -> Result<bool, Error> {
    let objects = db.require_log_store()?;
    let Some(StoredScript::Row(text)) = reports::script_of(db.pool(), id).await? else {
        return Ok(false);
    };
    let prefix = fresh_prefix("scripts")?;
    store::record_pending(db.pool(), &prefix, objects.grace()).await?;
    let sha256 = Sha256::digest(text.as_bytes()).to_vec();
    let key = script_key(&prefix);
    objects
        .put(&key, text.as_bytes().to_vec())
        .await
        .map_err(DbError::from)?;
    let place = ScriptPlace::Objects {
        prefix: prefix.clone(),
        sha256: sha256.clone(),
    };
    let back = objects.get(&key).await.map_err(DbError::from)?;
    if Sha256::digest(&back)[..] != sha256[..] {
        abandon_script(db, &place).await;
        return Err(DbError::from(StoreError::Corrupt {
            url: objects.url().to_owned(),
            key,
        })
        .into());
    }
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    if !reports::script_to_object(&mut tx, id, &text, &prefix, &sha256).await? {
        tx.rollback().await.map_err(DbError::from)?;
        abandon_script(db, &place).await;
        return Ok(false);
    }
    tx.commit().await.map_err(DbError::from)?;
    Ok(true)
}

/// Moves report `id`'s script from the store back into its row, verified against its recorded
/// SHA-256; `false` when it changed meanwhile.
async fn script_to_row(db: &Db, id: i64) -> Result<bool, Error> {
    let Some(StoredScript::Object { prefix, sha256 }) = reports::script_of(db.pool(), id).await?
    else {
        return Ok(false);
    };
    let stored = StoredScript::Object {
        prefix: prefix.clone(),
        sha256,
    };
    let text = read_script(db, stored).await?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    if !reports::script_to_row(&mut tx, id, &prefix, &text).await? {
        tx.rollback().await.map_err(DbError::from)?;
        return Ok(false);
    }
    tx.commit().await.map_err(DbError::from)?;
    Ok(true)
}

fn corrupt_row(id: i64, seq: i32) -> Error {
    Error::Internal(anyhow::anyhow!(
        "chunk {seq} of report {id}'s log does not match its recorded SHA-256; left where it is"
    ))
}
