//! What tells look-alike groups apart in the group list (issue 39 item 4): for each group of a
//! page, the projects its reports come from, the framework their logs name, the short
//! environment labels they were uploaded with (`ci-a100`, `node-7`: where they ran), the
//! distributed ranks their facts name and the hosts their root-cause lines come from. Read for one page of groups in one statement, from each
//! group's newest reports only, so a group of a million reports costs what one of a hundred
//! does. Policy (how many values a row shows) lives in `app::group_triage`.

use std::collections::HashMap;

use sqlx::PgExecutor;

use super::DbError;

/// Reports read per group: its newest.
pub const REPORTS_READ: i64 = 200;

/// Values kept per tag and group, most frequent first.
const VALUES_KEPT: i64 = 8;

/// One group's facets, each tag's values most frequent first (at most eight), with how many
/// distinct values its newest reports name in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facets {
    pub projects: Vec<String>,
    pub projects_total: i64,
    pub frameworks: Vec<String>,
    /// Short single-line environment labels (at most 100 characters), as the group page's
    /// tag breakdown counts them.
    pub environments: Vec<String>,
    pub environments_total: i64,
    /// Ranks in ascending order (the most frequent eight).
    pub ranks: Vec<u32>,
    pub ranks_total: i64,
    /// The hosts the root-cause lines come from (the `failing_host` fact), most frequent first.
    pub hosts: Vec<String>,
    pub hosts_total: i64,
}

/// The facets of groups `ids`, by group id (a group without reports is missing).
pub async fn facets(ex: impl PgExecutor<'_>, ids: &[i64]) -> Result<HashMap<i64, Facets>, DbError> {
    let rows = sqlx::query!(
        r#"WITH recent AS (
             SELECT g.id AS group_id, r.project, r.environment, r.classification
             FROM unnest($1::int8[]) g(id)
             CROSS JOIN LATERAL (SELECT project, environment, classification FROM reports
                 WHERE group_id = g.id ORDER BY created_at DESC LIMIT $2) r),
         vals AS (
             SELECT group_id, 'project' AS tag, btrim(project) AS value FROM recent
             UNION ALL
             SELECT group_id, 'framework', btrim(classification ->> 'framework') FROM recent
             UNION ALL
             SELECT group_id, 'environment', btrim(environment) FROM recent
             WHERE length(btrim(environment)) <= 100
               AND strpos(btrim(environment), E'\n') = 0
             UNION ALL
             SELECT group_id, 'rank', k.value FROM recent
             CROSS JOIN LATERAL jsonb_array_elements_text(
                 CASE WHEN jsonb_typeof(classification -> 'facts' -> 'ranks') = 'array'
                      THEN classification -> 'facts' -> 'ranks' ELSE '[]'::jsonb END) k
             UNION ALL
             SELECT group_id, 'host', btrim(classification -> 'facts' ->> 'failing_host')
             FROM recent),
         counted AS (
             SELECT group_id, tag, left(value, 200) AS value,
                 row_number() OVER (PARTITION BY group_id, tag
                     ORDER BY count(*) DESC, left(value, 200)) AS rank,
                 count(*) OVER (PARTITION BY group_id, tag) AS total
             FROM vals WHERE coalesce(value, '') <> ''
             GROUP BY group_id, tag, left(value, 200))
         SELECT group_id AS "group_id!", tag AS "tag!", value AS "value!", total AS "total!"
         FROM counted WHERE rank <= $3
         ORDER BY group_id, tag, rank"#,
        ids,
        REPORTS_READ,
        VALUES_KEPT
    )
    .fetch_all(ex)
    .await?;
    let mut out: HashMap<i64, Facets> = HashMap::new();
    for row in rows {
        let (value, total) = (row.value, row.total);
        let f = out.entry(row.group_id).or_default();
        match row.tag.as_str() {
            "project" => {
                f.projects.push(value);
                f.projects_total = total;
            }
            "framework" => f.frameworks.push(value),
            "host" => {
                f.hosts.push(value);
                f.hosts_total = total;
            }
            "environment" => {
                f.environments.push(value);
                f.environments_total = total;
            }
            "rank" => {
                // Facts hold ranks as numbers; anything else was not written by this service.
                if let Ok(rank) = value.parse() {
                    f.ranks.push(rank);
                }
                f.ranks_total = total;
            }
            _ => {}
        }
    }
    for f in out.values_mut() {
        f.ranks.sort_unstable();
    }
    Ok(out)
}
