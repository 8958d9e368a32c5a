//! Groups of recurring failures (one per fingerprint) and the fixes people record for them.

use sqlx::{Acquire, PgExecutor, Postgres};

use super::DbError;
use crate::actor::{Actor, ActorKind};
use crate::rules::Category;
use crate::rules::likeness::Trigrams;
use crate::time::Timestamp;

/// A group of reports that share a root cause.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Group {
    pub id: i64,
    pub fingerprint: String,
    pub category: crate::rules::Category,
    pub title: String,
    pub root_cause_text: String,
    /// The latest reproduction verdict with repeats ("flaky: fails 2/5"), or empty.
    pub verdict: String,
    /// Reports in the group: those stored and those retention deleted.
    pub report_count: i64,
    /// Of those, the reports retention deleted (migration 0020).
    pub removed_count: i64,
    #[sqlx(rename = "first")]
    pub first_seen: crate::time::Timestamp,
    #[sqlx(rename = "last")]
    pub last_seen: crate::time::Timestamp,
    /// The failure's shape: normalized text, then the user's own frames (migration 0018).
    pub signature: String,
}

impl Group {
    /// The user's own innermost frame in the failure (`train.py:forward`), if the signature
    /// names one: what tells apart groups of the same error raised from different code.
    #[must_use]
    pub fn culprit(&self) -> Option<&str> {
        crate::rules::culprit(&self.signature)
    }
}

/// A recorded fix as its row holds it. The API's `api_types::Fix` is built from it in `app`
/// (`app::triage`), so a column change here cannot alter the wire shape unnoticed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    pub id: i64,
    pub group_id: i64,
    /// What fixed it, in a line.
    pub summary: String,
    pub details: String,
    /// A link to the change; empty when none.
    pub link: String,
    /// Who recorded it, as recorded (a person's or a token's name).
    pub author: String,
    /// `None` for a fix recorded before actors were typed.
    pub author_kind: Option<crate::actor::ActorKind>,
    /// The person who recorded it, when a person did (and still exists).
    pub author_person_id: Option<i64>,
    pub created_at: crate::time::Timestamp,
}

/// A fix to record.
#[derive(Clone, Debug)]
pub struct NewFix {
    pub summary: String,
    pub details: String,
    pub link: String,
    /// Who recorded it: a person, or a token.
    pub author: Actor,
}

// A group is read with its report count and last-seen time from its reports (`reports_group`
// answers both from the index) and from the counts of the reports retention deleted (per
// project and day, migration 0020): `FROM groups g` with two lateral joins, `x` over
// `group_expired_reports` and `s` over `reports`. Every statement that reads a `Group`
// (here, in group_list.rs, group_merge.rs and the search's details) writes them out: the
// build-time checked macros take one literal each.

/// The group with this id.
pub async fn get_group(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Group>, DbError> {
    Ok(sqlx::query_as!(
        Group,
        r#"SELECT g.id, g.fingerprint, g.category AS "category: Category", g.title,
             g.root_cause_text, g.verdict, g.signature,
             s.report_count AS "report_count!", s.removed_count AS "removed_count!",
             g.first_seen AS "first_seen: Timestamp",
             coalesce(s.last_seen, g.first_seen) AS "last_seen!: Timestamp"
         FROM groups g
         CROSS JOIN LATERAL (SELECT sum(e.reports)::int8 AS reports,
                 max(e.last_seen) AS last_seen
             FROM group_expired_reports e WHERE e.group_id = g.id) x
         CROSS JOIN LATERAL (SELECT count(*) + coalesce(x.reports, 0) AS report_count,
                 coalesce(x.reports, 0) AS removed_count,
                 GREATEST(max(r.created_at), x.last_seen) AS last_seen
             FROM reports r WHERE r.group_id = g.id) s
         WHERE g.id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?)
}

/// Groups seen most recently first (merged groups left out: their reports are elsewhere).
pub async fn recent_groups(ex: impl PgExecutor<'_>, limit: i64) -> Result<Vec<Group>, DbError> {
    Ok(sqlx::query_as!(
        Group,
        r#"SELECT g.id, g.fingerprint, g.category AS "category: Category", g.title,
             g.root_cause_text, g.verdict, g.signature,
             s.report_count AS "report_count!", s.removed_count AS "removed_count!",
             g.first_seen AS "first_seen: Timestamp",
             coalesce(s.last_seen, g.first_seen) AS "last_seen!: Timestamp"
         FROM (
             SELECT g.* FROM groups g WHERE g.merged_into IS NULL
             ORDER BY g.last_seen DESC, g.id DESC LIMIT $1) g
         CROSS JOIN LATERAL (SELECT sum(e.reports)::int8 AS reports,
                 max(e.last_seen) AS last_seen
             FROM group_expired_reports e WHERE e.group_id = g.id) x
         CROSS JOIN LATERAL (SELECT count(*) + coalesce(x.reports, 0) AS report_count,
                 coalesce(x.reports, 0) AS removed_count,
                 GREATEST(max(r.created_at), x.last_seen) AS last_seen
             FROM reports r WHERE r.group_id = g.id) s
         ORDER BY coalesce(s.last_seen, g.first_seen) DESC, g.id DESC"#,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// The fixes recorded for a group, newest first.
pub async fn group_fixes(ex: impl PgExecutor<'_>, group_id: i64) -> Result<Vec<Fix>, DbError> {
    Ok(sqlx::query_as!(
        Fix,
        r#"SELECT id, group_id, summary, details, link, author,
             author_kind AS "author_kind: ActorKind", author_person_id,
             created_at AS "created_at: Timestamp"
         FROM fixes WHERE group_id = $1 ORDER BY created_at DESC, id DESC"#,
        group_id
    )
    .fetch_all(ex)
    .await?)
}

/// Records a fix; `None` when the group does not exist.
pub async fn insert_fix(
    ex: impl PgExecutor<'_>,
    group_id: i64,
    fix: &NewFix,
) -> Result<Option<Fix>, DbError> {
    Ok(sqlx::query_as!(
        Fix,
        r#"INSERT INTO fixes (group_id, summary, details, link, author, author_kind,
             author_person_id, author_token_id)
         SELECT id, $2, $3, $4, $5, $6, $7, $8 FROM groups WHERE id = $1
         RETURNING id, group_id, summary, details, link, author,
             author_kind AS "author_kind: ActorKind", author_person_id,
             created_at AS "created_at: Timestamp""#,
        group_id,
        fix.summary,
        fix.details,
        fix.link,
        fix.author.name(),
        fix.author.kind().as_str(),
        fix.author.person_id(),
        fix.author.token_id()
    )
    .fetch_optional(ex)
    .await?)
}

/// Reports per UTC day over the last `days` days for each of `group_ids`:
/// (group id, `YYYY-MM-DD`, count), plus today's date as the database sees it. Reports that
/// retention deleted count on the day they were uploaded.
pub async fn group_trends(
    conn: impl Acquire<'_, Database = Postgres>,
    group_ids: &[i64],
    days: i32,
) -> Result<(Vec<(i64, String, i64)>, String), DbError> {
    let mut conn = conn.acquire().await?;
    let rows = sqlx::query!(
        r#"SELECT group_id AS "group_id!", to_char(day, 'YYYY-MM-DD') AS "day!",
             sum(n)::int8 AS "n!"
         FROM (
             SELECT group_id, (created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n
             FROM reports WHERE group_id = ANY($1)
               AND created_at > now() - make_interval(days => $2) GROUP BY 1, 2
             UNION ALL
             SELECT group_id, day, sum(reports) FROM group_expired_reports
             WHERE group_id = ANY($1)
               AND day >= ((now() - make_interval(days => $2)) AT TIME ZONE 'UTC')::date
             GROUP BY 1, 2) d
         GROUP BY 1, 2 ORDER BY 1, 2"#,
        group_ids,
        days
    )
    .fetch_all(&mut *conn)
    .await?;
    let today = sqlx::query_scalar!(
        r#"SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS "today!""#
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((
        rows.into_iter().map(|r| (r.group_id, r.day, r.n)).collect(),
        today,
    ))
}

/// A group whose signature is close to another failure's.
#[derive(Clone, Debug)]
pub struct Similar {
    pub group: Group,
    /// Trigram similarity of the two signatures, 0 to 1.
    pub similarity: f32,
}

/// Most groups read for each of a signature's band keys (migration 0051): the newest holding
/// it. Sixteen keys, so at most 384 candidates, however many groups are stored. Written out as
/// the `LIMIT` of [`similar_groups`]'s statement, which a build-time assertion keeps equal.
pub const PER_BAND: i64 = 24;

/// The groups other than `exclude` (and other than merged groups, whose failures are their
/// targets' now) whose signature is at least `min_similarity` alike to `signature`
/// ([`Trigrams::likeness`]: the Jaccard index of the trigram sets; a group with no trigram in
/// common is never listed), most alike first, at most `limit`.
///
/// Candidates are the groups holding one of the signature's MinHash band keys
/// ([`Trigrams::band_keys`], table `group_bands`): for each key, the [`PER_BAND`] newest,
/// read from the B-tree. Only their signatures are read; the likeness is computed here (pg_trgm's
/// `similarity` in SQL took 80 µs a candidate, most of the lookup), and only the groups listed
/// are read whole. The cost is bounded whatever the number of groups (issue 42: the
/// nearest-first walk of a trigram GiST index read all of it at 100,000 alike signatures), and
/// no step depends on a planner estimate: each key is an equality on the index's leading
/// column under a `LIMIT`, each candidate a primary-key lookup. A group that shares no key
/// with `signature` (likely below 0.5 likeness: see [`crate::rules::likeness`]) or only keys
/// held by more newer groups than [`PER_BAND`] is not found.
pub async fn similar_groups(
    conn: &mut sqlx::PgConnection,
    signature: &str,
    exclude: i64,
    min_similarity: f32,
    limit: i64,
) -> Result<Vec<Similar>, DbError> {
    let probe = Trigrams::of(signature);
    let keys = probe.band_keys();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    // The statement writes `PER_BAND` out (the macro needs one literal): kept equal here.
    const _: () = assert!(
        PER_BAND == 24,
        "write the new PER_BAND into the LIMIT below"
    );
    let candidates = sqlx::query!(
        "SELECT g.id, g.signature
         FROM (SELECT DISTINCT b.group_id
               FROM unnest($1::int8[]) AS probe(key),
               LATERAL (SELECT group_id FROM group_bands
                        WHERE key = probe.key AND group_id <> $2
                        ORDER BY group_id DESC LIMIT 24) b) c
         JOIN groups g ON g.id = c.group_id
         WHERE g.merged_into IS NULL",
        &keys[..],
        exclude
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut alike: Vec<(i64, f32)> = candidates
        .iter()
        .map(|c| (c.id, probe.likeness(&Trigrams::of(&c.signature))))
        .filter(|&(_, sim)| sim > 0.0 && sim >= min_similarity)
        .collect();
    // Most alike first, then newest; twice the limit are read whole, to order equals by when
    // they were last seen.
    alike.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    alike.truncate(usize::try_from(limit.max(0)).unwrap_or(0).saturating_mul(2));
    let ids: Vec<i64> = alike.iter().map(|(id, _)| *id).collect();
    let mut groups = groups_by_ids(&mut *conn, &ids).await?;
    let mut found: Vec<Similar> = alike
        .into_iter()
        .filter_map(|(id, similarity)| {
            let at = groups.iter().position(|g| g.id == id)?;
            Some(Similar {
                group: groups.swap_remove(at),
                similarity,
            })
        })
        .collect();
    found.sort_by(|a, b| {
        b.similarity
            .total_cmp(&a.similarity)
            .then(b.group.last_seen.cmp(&a.group.last_seen))
            .then(b.group.id.cmp(&a.group.id))
    });
    found.truncate(usize::try_from(limit.max(0)).unwrap_or(0));
    Ok(found)
}

/// Stores the band keys of a group's `signature` (a new group's); keys it already holds are
/// kept.
pub async fn insert_band_keys(
    ex: impl PgExecutor<'_>,
    group_id: i64,
    signature: &str,
) -> Result<(), DbError> {
    insert_band_keys_of(ex, &[(group_id, signature)]).await?;
    Ok(())
}

/// [`insert_band_keys`] for several groups in one statement; returns how many of them have
/// keys (a signature without a word has none).
pub async fn insert_band_keys_of(
    ex: impl PgExecutor<'_>,
    groups: &[(i64, &str)],
) -> Result<u64, DbError> {
    let (mut ids, mut keys, mut keyed) = (Vec::new(), Vec::new(), 0);
    for (id, signature) in groups {
        let of = Trigrams::of(signature).band_keys();
        keyed += u64::from(!of.is_empty());
        for key in of {
            ids.push(*id);
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Ok(0);
    }
    sqlx::query!(
        "INSERT INTO group_bands (key, group_id) SELECT * FROM unnest($1::int8[], $2::int8[])
         ON CONFLICT DO NOTHING",
        &keys[..],
        &ids[..]
    )
    .execute(ex)
    .await?;
    Ok(keyed)
}

/// Up to `limit` groups after `after` (by id) that hold no band key, with their signatures:
/// the groups stored before migration 0051, keyed once at start.
pub async fn groups_without_keys(
    ex: impl PgExecutor<'_>,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, DbError> {
    let rows = sqlx::query!(
        "SELECT g.id, g.signature FROM groups g
         WHERE g.id > $1 AND g.signature <> ''
           AND NOT EXISTS (SELECT 1 FROM group_bands b WHERE b.group_id = g.id)
         ORDER BY g.id LIMIT $2",
        after,
        limit
    )
    .fetch_all(ex)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.signature)).collect())
}

/// Answers of [`similar_groups`] remembered between uploads of the same failure (issue 42):
/// the nearest-signature scan cost as much PostgreSQL time as storing a recurring report. An
/// answer is kept with the value `groups_shape_version` had when it was read (migration 0045:
/// every insert, delete, merge, unmerge or new signature of a group advances it, on any
/// replica) and used only while the value is unchanged and for at most [`MEMO_TTL`]: a group
/// committed while an answer was being read can be missed until then. The groups themselves
/// are read afresh on every use (state, counts, and merged groups dropped); only which groups
/// and how alike is remembered.
#[derive(Debug, Default)]
pub struct NearestMemo {
    entries: std::sync::Mutex<std::collections::HashMap<MemoKey, Remembered>>,
}

/// What a lookup asked: the signature, the group left out, the floor's bits and the limit.
type MemoKey = (String, i64, u32, i64);

#[derive(Debug)]
struct Remembered {
    version: i64,
    at: std::time::Instant,
    found: Vec<(i64, f32)>,
}

/// Most answers remembered; past it the memo starts over (a burst of new failures is not
/// remembered, it is looked up).
const MEMO_ENTRIES: usize = 4096;
/// Longest an answer is used.
const MEMO_TTL: std::time::Duration = std::time::Duration::from_secs(60);

impl NearestMemo {
    fn recall(&self, key: &MemoKey) -> Option<(i64, Vec<(i64, f32)>)> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(key)
            .filter(|r| r.at.elapsed() < MEMO_TTL)
            .map(|r| (r.version, r.found.clone()))
    }

    fn remember(&self, key: MemoKey, version: i64, found: Vec<(i64, f32)>) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MEMO_ENTRIES && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(
            key,
            Remembered {
                version,
                at: std::time::Instant::now(),
                found,
            },
        );
    }
}

/// The value of `groups_shape_version` now (migration 0045).
async fn shape_version(ex: impl PgExecutor<'_>) -> Result<i64, DbError> {
    Ok(
        sqlx::query_scalar!("SELECT last_value FROM groups_shape_version")
            .fetch_one(ex)
            .await?,
    )
}

/// [`similar_groups`], answered from `memo` while no group changed since it was remembered.
pub async fn similar_groups_memo(
    conn: &mut sqlx::PgConnection,
    memo: &NearestMemo,
    signature: &str,
    exclude: i64,
    min_similarity: f32,
    limit: i64,
) -> Result<Vec<Similar>, DbError> {
    if signature.trim().is_empty() {
        return Ok(Vec::new());
    }
    let key = (
        signature.to_owned(),
        exclude,
        min_similarity.to_bits(),
        limit,
    );
    let version = shape_version(&mut *conn).await?;
    if let Some((at, found)) = memo.recall(&key)
        && at == version
    {
        let ids: Vec<i64> = found.iter().map(|(id, _)| *id).collect();
        let mut groups = groups_by_ids(&mut *conn, &ids).await?;
        return Ok(found
            .into_iter()
            .filter_map(|(id, similarity)| {
                let at = groups.iter().position(|g| g.id == id)?;
                Some(Similar {
                    group: groups.swap_remove(at),
                    similarity,
                })
            })
            .collect());
    }
    // Read after the version: a change committed in between makes the next use look again.
    let found = similar_groups(&mut *conn, signature, exclude, min_similarity, limit).await?;
    memo.remember(
        key,
        version,
        found.iter().map(|s| (s.group.id, s.similarity)).collect(),
    );
    Ok(found)
}

/// The live (not merged) groups among `ids`, in no order.
async fn groups_by_ids(ex: impl PgExecutor<'_>, ids: &[i64]) -> Result<Vec<Group>, DbError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as!(
        Group,
        r#"SELECT g.id, g.fingerprint, g.category AS "category: Category", g.title,
             g.root_cause_text, g.verdict, g.signature,
             s.report_count AS "report_count!", s.removed_count AS "removed_count!",
             g.first_seen AS "first_seen: Timestamp",
             coalesce(s.last_seen, g.first_seen) AS "last_seen!: Timestamp"
         FROM groups g
         CROSS JOIN LATERAL (SELECT sum(e.reports)::int8 AS reports,
                 max(e.last_seen) AS last_seen
             FROM group_expired_reports e WHERE e.group_id = g.id) x
         CROSS JOIN LATERAL (SELECT count(*) + coalesce(x.reports, 0) AS report_count,
                 coalesce(x.reports, 0) AS removed_count,
                 GREATEST(max(r.created_at), x.last_seen) AS last_seen
             FROM reports r WHERE r.group_id = g.id) s
         WHERE g.id = ANY($1) AND g.merged_into IS NULL"#,
        ids
    )
    .fetch_all(ex)
    .await?)
}

/// The fixes recorded for any of `group_ids`, newest first.
pub async fn fixes_of_groups(
    ex: impl PgExecutor<'_>,
    group_ids: &[i64],
) -> Result<Vec<Fix>, DbError> {
    Ok(sqlx::query_as!(
        Fix,
        r#"SELECT id, group_id, summary, details, link, author,
             author_kind AS "author_kind: ActorKind", author_person_id,
             created_at AS "created_at: Timestamp"
         FROM fixes WHERE group_id = ANY($1)
         ORDER BY created_at DESC, id DESC"#,
        group_ids
    )
    .fetch_all(ex)
    .await?)
}
