//! No upstream process outlives sluice (Linux).
//!
//! sluice stops its stdio upstreams when it shuts down: it closes their
//! stdin, waits, then kills them. A sluice that is killed outright
//! (`kill -9`, the OOM killer, a client that kills it) cannot, and a server
//! that does not exit when its stdin ends would run on for ever, its parent
//! gone (a server-everything a test's sluice had started was found so, no
//! process holding its stdin). So each stdio upstream
//! is started through sluice's own binary (`sluice exec-upstream PARENT --
//! COMMAND…`), which asks the kernel to send it SIGTERM when its parent
//! dies (`PR_SET_PDEATHSIG`) and then becomes the upstream's command
//! (`exec`: same process, same pid, the setting kept). A setting made in
//! the child between `fork` and `exec` would need `unsafe` (`pre_exec`);
//! this needs none.
//!
//! The launcher cannot report a failed `exec` the way a failed spawn is
//! reported, so sluice first checks that the command can be run
//! ([`runnable`], the search `exec` makes): a missing command or one that is
//! not executable is refused with the error a direct spawn gives. Elsewhere
//! than Linux the command is started directly.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The hidden subcommand that starts an upstream tethered to sluice.
pub const SUBCOMMAND: &str = "exec-upstream";

/// The command that starts `program` with `args`, tethered to this process
/// on Linux (see the module's documentation). `path` is the `PATH` the
/// child gets (the upstream's `env` may set one) and `cwd` its working
/// directory, to look the program up as `exec` will.
pub fn command(
    program: &str,
    args: &[String],
    path: Option<&OsStr>,
    cwd: Option<&Path>,
) -> std::io::Result<tokio::process::Command> {
    // Without /proc, as in some sandboxes, the command starts directly.
    let Some(binary) = running_binary() else {
        let mut direct = tokio::process::Command::new(program);
        direct.args(args);
        return Ok(direct);
    };
    runnable(program, path, cwd)?;
    let mut tethered = tokio::process::Command::new(binary);
    tethered
        .arg(SUBCOMMAND)
        .arg(std::process::id().to_string())
        .arg("--")
        .arg(program)
        .args(args);
    Ok(tethered)
}

/// The file sluice's code was loaded from, to start the launcher with (on
/// Linux; `None` elsewhere or without `/proc`). It is the file mapped where
/// this function's code is (`/proc/self/maps`), not `/proc/self/exe`,
/// which is the program the kernel started: sluice itself only when
/// nothing ran it. Under valgrind it is valgrind's tool, under `ld.so
/// sluice …` the loader, and either takes `exec-upstream` for a program
/// of its own, so that no stdio upstream started. A binary replaced or
/// deleted since it started is mapped as "(deleted)": then
/// `/proc/self/exe`, which still opens the file that runs.
pub(crate) fn running_binary() -> Option<PathBuf> {
    const STARTED: &str = "/proc/self/exe";
    if !cfg!(target_os = "linux") {
        return None;
    }
    let here = running_binary as fn() -> Option<PathBuf> as usize;
    let loaded = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| code_file(&maps, here).map(PathBuf::from))
        .filter(|file| file.is_file());
    loaded.or_else(|| Path::new(STARTED).exists().then(|| PathBuf::from(STARTED)))
}

/// The file mapped at `address` in `maps` (the text of `/proc/PID/maps`),
/// if it is a file that still has that name: not one shown "(deleted)",
/// nor an anonymous or special mapping (`[stack]`, `[vdso]`).
fn code_file(maps: &str, address: usize) -> Option<&str> {
    maps.lines().find_map(|line| {
        // start-end perms offset dev inode   path
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (
            usize::from_str_radix(start, 16).ok()?,
            usize::from_str_radix(end, 16).ok()?,
        );
        if !(start..end).contains(&address) {
            return None;
        }
        let file = fields.nth(4)?.trim_start();
        (file.starts_with('/') && !file.ends_with(" (deleted)")).then_some(file)
    })
}

/// The launcher's parent and command, if `args` (the process's, its name
/// first) are a launcher's: `sluice exec-upstream PARENT -- COMMAND…`.
pub fn launcher(args: &[OsString]) -> Option<(u32, &[OsString])> {
    match args {
        [_, sub, parent, dashes, command @ ..]
            if sub == SUBCOMMAND && dashes == "--" && !command.is_empty() =>
        {
            Some((parent.to_str()?.parse().ok()?, command))
        }
        _ => None,
    }
}

/// The launcher's side: asks for SIGTERM when `parent` dies, then becomes
/// `command`. Returns only if that failed (status 127, as a shell's).
pub fn exec(parent: u32, command: &[OsString]) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("sluice {SUBCOMMAND}: no command given");
        return ExitCode::from(127);
    };
    let program_shown = program.to_string_lossy();
    #[cfg(target_os = "linux")]
    {
        use nix::sys::signal::Signal;
        // Where the system refuses it (a sandbox's filter), the upstream
        // runs untethered, as it did before, rather than not at all.
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM) {
            eprintln!(
                "sluice {SUBCOMMAND}: `{program_shown}` will not end with sluice if sluice is killed outright (prctl refused: {e})"
            );
        }
        // sluice may have died before the request above: no signal would
        // come then, so do not start a server no one will stop.
        if std::os::unix::process::parent_id() != parent {
            eprintln!(
                "sluice {SUBCOMMAND}: not starting `{program_shown}`: sluice (pid {parent}), which asked for it, has exited"
            );
            return ExitCode::from(127);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let error = std::process::Command::new(program).args(args).exec();
        eprintln!("sluice {SUBCOMMAND}: cannot run `{program_shown}`: {error}");
        ExitCode::from(127)
    }
    #[cfg(not(unix))]
    {
        let _ = args;
        eprintln!("sluice {SUBCOMMAND}: `{program_shown}`: not supported on this system");
        ExitCode::from(127)
    }
}

/// Whether `exec` can run `program`, looked up as `execvp` does: a name
/// with a `/` as a path (relative to `cwd`), any other in each directory
/// of `path` (an empty entry is the working directory). The error is the
/// one a direct spawn gives: "No such file or directory" when nothing is
/// found, "Permission denied" when only files that may not be run are.
/// Without a `PATH` a bare name is left to `exec`.
pub fn runnable(program: &str, path: Option<&OsStr>, cwd: Option<&Path>) -> std::io::Result<()> {
    /// Linux's ENOENT and EACCES: the errors `exec` itself would give.
    const NOT_FOUND: i32 = 2;
    const DENIED: i32 = 13;
    let within = |file: &Path| -> PathBuf {
        match cwd {
            Some(cwd) if file.is_relative() => cwd.join(file),
            _ => file.to_path_buf(),
        }
    };
    let candidates: Vec<PathBuf> = if program.contains('/') {
        vec![within(Path::new(program))]
    } else if program.is_empty() {
        Vec::new()
    } else {
        let Some(path) = path else {
            return Ok(());
        };
        std::env::split_paths(path)
            .map(|dir| within(&dir.join(program)))
            .collect()
    };
    let mut denied = false;
    for candidate in candidates {
        match executable(&candidate) {
            Some(true) => return Ok(()),
            Some(false) => denied = true,
            None => {}
        }
    }
    Err(std::io::Error::from_raw_os_error(if denied {
        DENIED
    } else {
        NOT_FOUND
    }))
}

/// `None` if `file` is not there (or is a directory, which `exec` skips
/// too); else whether it may be run.
fn executable(file: &Path) -> Option<bool> {
    let meta = std::fs::metadata(file).ok()?;
    if meta.is_dir() {
        return Some(false);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        Some(meta.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    Some(true)
}

/// The `PATH` a child started with `env` (added to sluice's own
/// environment) gets.
pub fn child_path(env: &std::collections::BTreeMap<String, String>) -> Option<OsString> {
    env.get("PATH")
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_looked_up_as_exec_looks_it_up() {
        let dir = std::env::temp_dir().join(format!("sluice-tether-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let script = dir.join("bin/server");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let plain = dir.join("bin/notes.txt");
        std::fs::write(&plain, "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let path = std::env::join_paths([dir.join("nowhere"), dir.join("bin")]).unwrap();
        let found = |program: &str, cwd: Option<&Path>| {
            runnable(program, Some(&path), cwd).map_err(|e| e.to_string())
        };
        // A bare name, found in the second directory of PATH.
        assert_eq!(found("server", None), Ok(()));
        // Paths, absolute and relative to the child's working directory.
        assert_eq!(found(script.to_str().unwrap(), None), Ok(()));
        assert_eq!(found("bin/server", Some(&dir)), Ok(()));
        assert_eq!(found("./server", Some(&dir.join("bin"))), Ok(()));
        // What exec refuses, with exec's own words.
        let missing = found("no-such-server", None).unwrap_err();
        assert!(
            missing.starts_with("No such file or directory"),
            "{missing}"
        );
        let missing = found("/nonexistent/mcp-server", None).unwrap_err();
        assert!(
            missing.starts_with("No such file or directory"),
            "{missing}"
        );
        let denied = found("notes.txt", None).unwrap_err();
        assert!(denied.starts_with("Permission denied"), "{denied}");
        let directory = found(dir.to_str().unwrap(), None).unwrap_err();
        assert!(directory.starts_with("Permission denied"), "{directory}");
        // No PATH: a bare name is left to exec.
        assert_eq!(
            runnable("anything", None, None).map_err(|e| e.to_string()),
            Ok(())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_launcher_is_the_file_sluices_code_was_loaded_from() {
        let maps = "\
55d0c0a00000-55d0c0b00000 r--p 00000000 103:02 1311 /opt/sluice bin/sluice
55d0c0b00000-55d0c0c00000 r-xp 00100000 103:02 1311 /opt/sluice bin/sluice
7f0000000000-7f0000001000 r-xp 00000000 103:02 77   /usr/lib/ld-linux-x86-64.so.2
7f0000100000-7f0000200000 r-xp 00000000 103:02 99   /opt/old/sluice (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0     [stack]
7ffd00030000-7ffd00032000 r-xp 00000000 00:00 0
";
        // The file holding the address, its name with spaces kept.
        assert_eq!(
            code_file(maps, 0x55d0c0b12345),
            Some("/opt/sluice bin/sluice")
        );
        assert_eq!(
            code_file(maps, 0x7f0000000fff),
            Some("/usr/lib/ld-linux-x86-64.so.2")
        );
        // Ends are exclusive; a replaced file, a special or anonymous
        // mapping and an address mapped nowhere name nothing.
        assert_eq!(code_file(maps, 0x55d0c0c00000), None);
        assert_eq!(code_file(maps, 0x7f0000100010), None);
        assert_eq!(code_file(maps, 0x7ffd00000010), None);
        assert_eq!(code_file(maps, 0x7ffd00030010), None);
        assert_eq!(code_file(maps, 0x10), None);
        // This process's own: the test binary, as the kernel started it.
        if cfg!(target_os = "linux") {
            let running = running_binary().unwrap();
            assert_eq!(
                std::fs::canonicalize(running).unwrap(),
                std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap()
            );
        }
    }

    #[test]
    fn only_a_launchers_arguments_are_read_as_one() {
        let args = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let launched = args(&[
            "sluice",
            SUBCOMMAND,
            "42",
            "--",
            "node",
            "server.js",
            "--port",
            "1",
        ]);
        let (parent, command) = launcher(&launched).unwrap();
        assert_eq!(parent, 42);
        assert_eq!(command, &launched[4..]);
        for not in [
            args(&["sluice", "--", SUBCOMMAND, "42", "--", "x"]),
            args(&["sluice", SUBCOMMAND, "42", "--"]),
            args(&["sluice", SUBCOMMAND, "x42", "--", "x"]),
            args(&["sluice", SUBCOMMAND, "42", "x"]),
            args(&["sluice", "demo"]),
        ] {
            assert!(launcher(&not).is_none(), "{not:?}");
        }
    }

    #[test]
    fn the_childs_path_is_the_one_its_env_sets_else_sluices() {
        let env = [("PATH", "/mine"), ("HOME", "/home/x")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        assert_eq!(child_path(&env), Some(OsString::from("/mine")));
        assert_eq!(child_path(&Default::default()), std::env::var_os("PATH"));
    }
}
