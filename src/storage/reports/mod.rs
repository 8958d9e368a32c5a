//! Reports: insert (with duplicate detection, grouping by fingerprint, idempotency keys and the
//! reproduction job for an attached script, all in one transaction) and read back: the row
//! (`read.rs`), its log's chunks (`log.rs`), its script when the object store keeps it
//! (`script.rs`), the insert itself (`insert.rs`).

mod insert;
mod log;
mod read;
mod script;

pub use insert::{Headline, IdempotencyRecord, InsertOutcome, NewReport, Stored, insert_report};
pub use log::{
    LogChunk, LogPlace, log_chunk, log_chunk_count, log_chunk_index, log_chunks_for_lines,
    log_removed_at, logs_from_store, object_key,
};
pub use read::{
    Report, ReportSummary, counts_by_category, get_report, group_reports, list_reports,
    recent_reports,
};
pub use script::{
    ScriptPlace, StoredScript, script_key, script_of, script_to_object, script_to_row, scripts_on,
};
