//! Owner-only files: atomic private writes, checked reads, private dirs.
//!
//! What Switchyard keeps on disk (compiled artifacts and their key, the data directory's
//! records and blobs, the admin token) is read back as trusted: machine code, credentials,
//! the registry. So every such file is written owner-only (0600) and whole (a temp file,
//! fsync, rename, fsync of the directory), and read only if it is a regular file (never
//! through a symlink) owned by this process's user and accessible to no one else; its
//! directories are 0700 and this user's.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` if needed and makes sure it is owner-only: a directory, not a symlink,
/// owned by this process's user, mode 0700 (set if it was wider).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(std::io::Error::other(format!("{} is a symbolic link; not followed", dir.display())));
    }
    if !meta.is_dir() {
        return Err(std::io::Error::other(format!("{} is not a directory", dir.display())));
    }
    check_owner(dir, &meta)?;
    if meta.mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

fn check_owner(path: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    let me = euid();
    if meta.uid() != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is owned by uid {}, not this process's uid {me}", path.display(), meta.uid()),
        ));
    }
    Ok(())
}

/// Opens `path` for reading if it is a regular file (a symlink is not followed), owned by
/// this process's user and accessible to no one else (mode 0600 or narrower). The
/// checks are made on the open file, so they hold for what is read.
pub fn open_private(path: &Path) -> std::io::Result<File> {
    let file =
        OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path).map_err(
            |e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    std::io::Error::other(format!("{} is a symbolic link; not followed", path.display()))
                } else {
                    e
                }
            },
        )?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    check_owner(path, &meta)?;
    if meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} has mode {:04o}; only its owner may have access",
                path.display(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(file)
}

/// Reads a file that [`open_private`] accepts, at most `max` bytes (a larger one is an
/// error, not read).
pub fn read_private(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open_private(path)?;
    let len = file.metadata()?.len();
    if len > max {
        return Err(std::io::Error::other(format!("{} is {len} bytes, over {max}", path.display())));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether `name` is one of [`write_private`]'s temp names: what a process killed
/// mid-write leaves behind, for its owner to clear.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// Writes `dir/name` owner-only (0600) so that it is either absent/old or complete: a
/// temp file whose name is unique to this write (process id and a counter, created
/// exclusively, never through a symlink), fsync, rename over the target, fsync of the
/// directory (which makes the rename itself durable).
pub fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let temp = write_temp(dir, name.as_ref(), bytes)?;
    let result = std::fs::rename(&temp, dir.join(name)).and_then(|()| File::open(dir)?.sync_all());
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// As [`write_private`], but never over an existing `dir/name`: the temp file is linked
/// to that name, which fails (`AlreadyExists`) if something has it. For a file two
/// processes may create at once that must then hold the first one's bytes (a key).
pub fn create_private(dir: &Path, name: &OsStr, bytes: &[u8]) -> std::io::Result<()> {
    let temp = write_temp(dir, name, bytes)?;
    let result = std::fs::hard_link(&temp, dir.join(name));
    let _ = std::fs::remove_file(&temp);
    result?;
    File::open(dir)?.sync_all()
}

/// A new owner-only file in `dir` holding `bytes`, synced, under a temp name for `name`
/// unique to this write ([`is_temp_name`]); its path.
fn write_temp(dir: &Path, name: &OsStr, bytes: &[u8]) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{}.{}.{n}.tmp", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests;
