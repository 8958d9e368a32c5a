//! The labelled corpus format (`labels.csv`, optional `evidence.csv`, `cases/*.log`) parsed
//! from text, shared by `gpu-triage eval` and the rule preview's corpus dry run. Reading the
//! files is the caller's business; this module stays pure.

use std::collections::HashMap;

use super::Category;

/// One labelled case.
#[derive(Debug, Clone)]
pub struct Case {
    /// Case id (file stem).
    pub id: String,
    /// Expected category.
    pub label: Category,
    /// Expected async hint, when labelled.
    pub async_hint: Option<bool>,
    /// Accepted root-cause lines (empty when unknown).
    pub cause_lines: Vec<usize>,
    /// Expected facts, `key=value` as in evidence.csv.
    pub facts: Vec<(String, String)>,
}

/// What evidence.csv says about one case: accepted root-cause lines and facts.
type CaseEvidence = (Vec<usize>, Vec<(String, String)>);

/// Parses `labels.csv` (columns `id`, `label`, optional `async_hint`) and, when given, the text
/// of `evidence.csv`. The error says what is wrong without the file name.
pub fn parse_corpus(labels: &str, evidence: Option<&str>) -> Result<Vec<Case>, String> {
    let rows = parse_csv(labels);
    let header = rows.first().ok_or("empty")?;
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(id_col), Some(label_col)) = (col("id"), col("label")) else {
        return Err("needs columns id and label".into());
    };
    let async_col = col("async_hint");
    let mut evidence_by_id: HashMap<String, CaseEvidence> = HashMap::new();
    for row in evidence
        .map(parse_csv)
        .unwrap_or_default()
        .into_iter()
        .skip(1)
    {
        let Some(id) = row.first() else { continue };
        let lines = row
            .get(1)
            .map(|s| s.split('|').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_default();
        let facts = row
            .get(2)
            .map(|s| {
                s.split(';')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        evidence_by_id.insert(id.clone(), (lines, facts));
    }
    let mut cases = Vec::new();
    for (n, row) in rows.iter().enumerate().skip(1) {
        if row.iter().all(|c| c.is_empty()) {
            continue;
        }
        let id = row.get(id_col).cloned().unwrap_or_default();
        if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
            return Err(format!("line {}: invalid case id {id:?}", n + 1));
        }
        let label = row
            .get(label_col)
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| format!("line {}: unknown label", n + 1))?;
        let async_hint = async_col
            .and_then(|c| row.get(c))
            .and_then(|v| v.parse().ok());
        let (cause_lines, facts) = evidence_by_id.remove(&id).unwrap_or_default();
        cases.push(Case {
            id,
            label,
            async_hint,
            cause_lines,
            facts,
        });
    }
    Ok(cases)
}

/// A small CSV reader: commas, double-quoted fields with `""` escapes, CRLF.
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_handles_quotes_and_crlf() {
        let rows = parse_csv("id,notes\r\n001,\"a, b \"\"c\"\"\"\n002,plain");
        assert_eq!(
            rows,
            vec![
                vec!["id".to_owned(), "notes".to_owned()],
                vec!["001".to_owned(), "a, b \"c\"".to_owned()],
                vec!["002".to_owned(), "plain".to_owned()],
            ]
        );
    }

    #[test]
    fn labels_and_evidence_are_joined_by_id() {
        let cases = parse_corpus(
            "id,label,async_hint\na,out_of_memory,true\nb,unknown,\n",
            Some("id,lines,facts\na,3|4,total=1 GiB\n"),
        )
        .expect("parses");
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].cause_lines, vec![3, 4]);
        assert_eq!(cases[0].async_hint, Some(true));
        assert_eq!(cases[1].label, Category::Unknown);
        let bad = [
            ("", "empty"),
            ("id,x\n", "needs columns"),
            ("id,label\na,nope\n", "unknown label"),
            ("id,label\n../x,unknown\n", "invalid case id"),
        ];
        for (text, want) in bad {
            let err = parse_corpus(text, None).err().unwrap_or_default();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
