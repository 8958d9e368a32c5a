//! Similar failures: the groups whose failure has nearly the same shape as a report's (its
//! root cause with the numbers taken out, and the user's own stack frames), found by trigram
//! similarity on the signatures. This is how a failure worded differently, classified by
//! another rule or by none, still finds what was learnt about it before: the report page and
//! the API list them with their fixes, and when a report's own group has no fix, a close
//! enough group's fix becomes its "fixed before".

use sqlx::PgConnection;

use crate::storage::DbError;
use crate::storage::groups::{self, Fix, Group};

/// Least similarity for a group to be listed as similar.
pub const LISTED: f32 = 0.3;
/// Least similarity for a group's fix to be offered as this failure's known fix.
pub const FIX_OFFERED: f32 = 0.45;
/// Most similar groups listed.
const SHOWN: i64 = 5;
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

/// The groups other than `own_group` most like `signature`, each with its newest fixes.
#[tracing::instrument(name = "similar::of_signature", skip_all, fields(group_id = own_group))]
pub(crate) async fn of_signature(
    conn: &mut PgConnection,
    signature: &str,
    own_group: i64,
) -> Result<Vec<SimilarGroup>, DbError> {
    let found = groups::similar_groups(&mut *conn, signature, own_group, LISTED, SHOWN).await?;
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

/// What fixed this failure before: the newest fix of its own group, else the newest fix of
/// the most similar group at least [`FIX_OFFERED`] alike (its `group_id` says which).
#[must_use]
pub fn known_fix<'a>(own: &'a [Fix], similar: &'a [SimilarGroup]) -> Option<&'a Fix> {
    own.first().or_else(|| {
        similar
            .iter()
            .filter(|s| s.similarity >= FIX_OFFERED)
            .find_map(|s| s.fixes.first())
    })
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
    fn the_own_groups_fix_comes_first_then_a_close_groups() {
        let own = [fix(1, 10)];
        let near = [
            similar(20, 0.4, vec![fix(2, 20)]),
            similar(30, 0.8, vec![]),
            similar(40, 0.6, vec![fix(4, 40), fix(3, 40)]),
        ];
        assert_eq!(known_fix(&own, &near).map(|f| f.id), Some(1));
        // Own group without a fix: the most similar group that has one and is close enough.
        let near_sorted = [near[1].clone(), near[2].clone(), near[0].clone()];
        assert_eq!(known_fix(&[], &near_sorted).map(|f| f.id), Some(4));
        // Only a group below the floor has a fix: nothing is offered.
        assert_eq!(known_fix(&[], &near[..2]).map(|f| f.id), None);
        assert_eq!(near[1].percent(), 80);
    }
}
