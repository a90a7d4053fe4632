//! Creating the files of a views folder without surprises: a file that is
//! already there is replaced only when the caller says so, and a symbolic
//! link is never written through (it would send the bytes out of the folder),
//! only replaced as a link.

use crate::TraceError;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// What to do with a file that already exists where a view goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Existing {
    /// Refuse to touch it (the default: it may be somebody's file).
    #[default]
    Refuse,
    /// Replace it (a link is replaced as a link, its target untouched).
    Replace,
}

fn io(path: &Path, source: std::io::Error) -> TraceError {
    TraceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `path` as a new file. An existing file or link is an
/// [`TraceError::Exists`] unless `existing` is [`Existing::Replace`]; the new
/// file is opened with `create_new`, which never follows a link.
pub fn create_file(path: &Path, existing: Existing) -> Result<File, TraceError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(io(
                path,
                std::io::Error::new(ErrorKind::IsADirectory, "is a directory"),
            ))
        }
        Ok(_) if existing == Existing::Refuse => {
            return Err(TraceError::Exists(path.to_path_buf()))
        }
        Ok(_) => std::fs::remove_file(path).map_err(|e| io(path, e))?,
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io(path, e)),
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io(path, e))
}

/// Creates the folders `base/parts[0]/parts[1]/...` (`base` itself must
/// exist); any of them that is a link is refused, so nothing below `base` is
/// written outside it.
pub fn create_dirs_within(base: &Path, parts: &[&str]) -> Result<PathBuf, TraceError> {
    let mut dir = base.to_path_buf();
    for part in parts {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(TraceError::NotAFolder(dir)),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::fs::create_dir(&dir).map_err(|e| io(&dir, e))?;
            }
            Err(e) => return Err(io(&dir, e)),
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tpusim-output-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn existing_files_are_refused_unless_replaced() {
        let d = temp("exists");
        let f = d.join("report.html");
        std::fs::write(&f, "mine").unwrap();
        let e = create_file(&f, Existing::Refuse).unwrap_err();
        assert!(matches!(e, TraceError::Exists(_)), "{e}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "mine");
        create_file(&f, Existing::Replace).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_are_never_written_through() {
        let d = temp("links");
        let target = d.join("precious.txt");
        std::fs::write(&target, "precious").unwrap();
        let link = d.join("views");
        std::fs::create_dir(&link).unwrap();
        let report = link.join("report.html");
        std::os::unix::fs::symlink(&target, &report).unwrap();
        assert!(create_file(&report, Existing::Refuse).is_err());
        create_file(&report, Existing::Replace).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&report)
            .unwrap()
            .file_type()
            .is_symlink());
        let outside = d.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, link.join("plugins")).unwrap();
        let e = create_dirs_within(&link, &["plugins", "profile"]).unwrap_err();
        assert!(matches!(e, TraceError::NotAFolder(_)), "{e}");
        assert!(!outside.join("profile").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
