//! Similar failures: the groups whose failure has nearly the same shape as a report's (its
//! root cause with the numbers taken out, and the user's own stack frames), found by trigram
//! similarity on the signatures. This is how a failure worded differently, classified by
//! another rule or by none, still finds what was learnt about it before: the report page and
//! the API list them with their fixes, apart from the report's own and never as its fix:
//! "Fixed before" is only the report's own group's fix (issue 39 item 2). A group is keyed by
//! the failure in the program's own code (or, for an environment failure, by the message and
//! the environment facts that decide its fix), so its fixes are the ones that apply; a similar
//! group is at most another program with the same error sentence, whose fix was for its code.

use sqlx::PgConnection;

use crate::storage::groups::{self, Fix, Group};
use crate::storage::{Db, DbError};

/// Least similarity for a group to be listed as similar.
pub const LISTED: f32 = 0.3;
/// Most similar groups listed.
pub const SHOWN: i64 = 5;
/// Most fixes listed per similar group.
const FIXES_SHOWN: usize = 3;

/// A group like the report's, with its newest fixes.
#[derive(Clone, Debug)]
pub struct SimilarGroup {
    pub group: Group,
    /// Trigram similarity of the two signatures, 0 to 1.
    pub similarity: f32,
    /// Its fixes, newest first (at most three).
    pub fixes: Vec<Fix>,
}

impl SimilarGroup {
    /// The similarity as a whole percentage.
    #[must_use]
    pub fn percent(&self) -> u32 {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a similarity clamped to 0..=1, times 100, fits a u32"
        )]
        let p = (self.similarity.clamp(0.0, 1.0) * 100.0).round() as u32;
        p
    }
}

/// Groups keyed at a time by [`key_groups`].
const KEY_BATCH: i64 = 500;

/// Gives the groups stored before migration 0051 their band keys, so that similar-failure
/// lookups find them; returns how many groups it keyed. Run in the background at start: until
/// it is done, a lookup misses the groups not keyed yet. Groups stored since are keyed when
/// they are inserted; a group whose signature has no word has no key and is passed over.
pub async fn key_groups(db: &Db) -> Result<u64, DbError> {
    let (mut after, mut keyed) = (0, 0u64);
    loop {
        let batch = groups::groups_without_keys(db.pool(), after, KEY_BATCH).await?;
        let Some(&(last, _)) = batch.last() else {
            return Ok(keyed);
        };
        after = last;
        let pairs: Vec<(i64, &str)> = batch.iter().map(|(id, s)| (*id, s.as_str())).collect();
        keyed += groups::insert_band_keys_of(db.pool(), &pairs).await?;
    }
}

/// The groups other than `own_group` most like `signature`, each with its newest fixes.
#[tracing::instrument(name = "similar::of_signature", skip_all, fields(group_id = own_group))]
pub(crate) async fn of_signature(
    conn: &mut PgConnection,
    memo: &groups::NearestMemo,
    signature: &str,
    own_group: i64,
) -> Result<Vec<SimilarGroup>, DbError> {
    let found =
        groups::similar_groups_memo(&mut *conn, memo, signature, own_group, LISTED, SHOWN).await?;
    let ids: Vec<i64> = found.iter().map(|s| s.group.id).collect();
    let fixes = if ids.is_empty() {
        Vec::new()
    } else {
        groups::fixes_of_groups(&mut *conn, &ids).await?
    };
    Ok(found
        .into_iter()
        .map(|s| SimilarGroup {
            fixes: fixes
                .iter()
                .filter(|f| f.group_id == s.group.id)
                .take(FIXES_SHOWN)
                .cloned()
                .collect(),
            group: s.group,
            similarity: s.similarity,
        })
        .collect())
}

/// What fixed this failure before: the newest fix of its own group. A similar group's fix is
/// never offered as this failure's: on judged pairs of real logs (`tests/kb-judged`), two
/// failures of different programs with the same sentence rarely share a fix.
#[must_use]
pub fn known_fix(own: &[Fix]) -> Option<&Fix> {
    own.first()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fix(id: i64, group_id: i64) -> Fix {
        Fix {
            id,
            group_id,
            summary: format!("fix {id}"),
            details: String::new(),
            link: String::new(),
            author: "ci".into(),
            author_kind: None,
            author_person_id: None,
            created_at: crate::time::Timestamp::from_unix(1_700_000_000),
        }
    }

    fn similar(group_id: i64, similarity: f32, fixes: Vec<Fix>) -> SimilarGroup {
        SimilarGroup {
            group: Group {
                id: group_id,
                fingerprint: String::new(),
                category: crate::rules::Category::Unknown,
                title: String::new(),
                root_cause_text: String::new(),
                verdict: String::new(),
                report_count: 1,
                removed_count: 0,
                first_seen: crate::time::Timestamp::from_unix(1_700_000_000),
                last_seen: crate::time::Timestamp::from_unix(1_700_000_000),
                signature: String::new(),
            },
            similarity,
            fixes,
        }
    }

    #[test]
    fn only_the_own_groups_fix_is_offered_never_a_similar_groups() {
        let own = [fix(1, 10), fix(0, 10)];
        assert_eq!(known_fix(&own).map(|f| f.id), Some(1));
        // However alike a similar group is, its fix is not this failure's.
        let near = similar(40, 0.99, vec![fix(4, 40)]);
        assert_eq!(known_fix(&[]).map(|f| f.id), None);
        assert_eq!(near.percent(), 99);
    }
}
