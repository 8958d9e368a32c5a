//! Portal pages for reports: the start page (paste or upload a log, recent reports) and the
//! form post that stores one (`new`), the list of reports (`list`), the report page
//! (`page`: log pane, findings, facts, next steps, group, fixes, reproductions) and the raw
//! download (`raw`); a run of files adds its section (`run`).

mod findings;
mod list;
mod new;
mod page;
mod pane;
mod raw;
mod run;

pub(super) use findings::fact_rows;
pub use list::list_reports;
pub use new::{create_report, home};
pub use page::show_report;
pub use raw::raw_log;
