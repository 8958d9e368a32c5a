//! Who runs the cluster when gpu-triage itself runs as root (PostgreSQL refuses root: the
//! `postgres` system user), and a data root that user can reach even when gpu-triage creates it
//! under a strict umask (077 is common for root shells and service managers), which would
//! otherwise lock the cluster out of the folder it was just given.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::DbError;

/// The `postgres` user's uid and gid when this process runs as root; `None` otherwise.
pub(super) fn postgres_user_if_root() -> Result<Option<(u32, u32)>, DbError> {
    let me = fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1);
    if me != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|line| {
            let mut f = line.split(':');
            (f.next() == Some("postgres")).then_some(())?;
            let uid = f.nth(1)?.parse().ok()?;
            let gid = f.next()?.parse().ok()?;
            Some(Some((uid, gid)))
        })
        .ok_or_else(|| {
            DbError::Cluster(
                "running as root needs the `postgres` system user (created by the PostgreSQL \
                 server package) to run the embedded cluster"
                    .into(),
            )
        })
}

/// Creates `root` and any missing parents. With `for_postgres` (the cluster runs as another
/// user), each folder created here is made traversable and readable by others (0755) whatever
/// the umask; folders that already existed keep their mode, so an operator's choice stands.
pub(super) fn create_data_root(root: &Path, for_postgres: bool) -> std::io::Result<()> {
    let missing: Vec<&Path> = root.ancestors().take_while(|p| !p.exists()).collect();
    fs::create_dir_all(root)?;
    if for_postgres {
        for dir in missing {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_created_for_postgres_are_reachable_and_existing_ones_keep_their_mode() {
        let base = tempfile::tempdir().unwrap();
        let kept = base.path().join("kept");
        fs::create_dir(&kept).unwrap();
        fs::set_permissions(&kept, fs::Permissions::from_mode(0o750)).unwrap();
        let root = kept.join("a/b");
        create_data_root(&root, true).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            (mode(&kept), mode(&kept.join("a")), mode(&root)),
            (0o750, 0o755, 0o755)
        );
        // Again: nothing to create, nothing changed.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        create_data_root(&root, true).unwrap();
        assert_eq!(mode(&root), 0o700);
    }
}
