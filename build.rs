//! Rebuilds when a migration changes: `sqlx::migrate!` embeds `migrations/` at compile time,
//! and cargo does not otherwise know to watch that directory.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
