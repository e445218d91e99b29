//! The seed corpus and the settings every target shares.

use std::path::{Path, PathBuf};

use proptest::test_runner::{Config, FileFailurePersistence};

/// `tests/fuzz` at the repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz")
}

/// The seeds in `tests/fuzz/<dir>/` (its files, not its subdirectories),
/// with their names, sorted by name.
pub fn seeds(dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join(dir);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the corpus {} cannot be read: {e}", dir.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            path.is_file().then(|| {
                let name = path.file_name()?.to_string_lossy().into_owned();
                Some((name, std::fs::read(&path).ok()?))
            })?
        })
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// The settings of one target: `cases` generated cases unless
/// `PROPTEST_CASES` says otherwise; failures kept in
/// `tests/fuzz/regressions/<target>.txt`.
pub fn config(regressions: &'static str, cases: u32) -> Config {
    let mut config = Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

/// The path of a target's regression file, for [`config`].
#[macro_export]
macro_rules! regressions {
    ($target:literal) => {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fuzz/regressions/",
            $target,
            ".txt"
        )
    };
}
