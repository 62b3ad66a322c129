//! Path and command arguments.
//!
//! Paths, as the agent runtime's `assertPathAllowed`: absolute only,
//! normalised (`.` and empty segments dropped, so `//` is `/`; `..` removes
//! the segment before it and may not climb above `/`), then matched against
//! the allowed prefixes segment by segment (`/srv/data` allows
//! `/srv/data/x`, not `/srv/database`). Control characters, backslashes and
//! percent-encoded dots or slashes are refused: a tool that decodes or
//! converts them would see another path. Symbolic links are the server's:
//! the agent does not see its file system.
//!
//! Commands, as `assertCommandAllowed`: the first word must be one of the
//! allowed binaries by name, with no `/` (no `./git`, `/tmp/git`,
//! `/usr/bin/../bin/rm`), no `VAR=value` prefix, and the command line may not
//! hold shell operators (`;`, `&`, `|`, `$`, backquote, `<`, `>`) or control
//! characters that would start a second command.

/// Why a path or command was refused (the `rule` of the denial).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgViolation {
    /// Not absolute.
    RelativePath,
    /// `..` above the root.
    EscapesRoot,
    /// Outside every allowed prefix.
    PathNotAllowed,
    /// A control character, backslash or percent-encoded dot or slash.
    SuspiciousCharacters,
    /// Empty command.
    EmptyCommand,
    /// A path or `VAR=` in the command's first word.
    CommandPath,
    /// Shell operators in the command line.
    ShellOperator,
    /// A binary not in `allowed_commands`.
    CommandNotAllowed,
}

impl ArgViolation {
    /// The rule name shown in denials and metadata.
    pub fn rule(self) -> &'static str {
        match self {
            ArgViolation::RelativePath => "relative_path",
            ArgViolation::EscapesRoot => "path_escapes_root",
            ArgViolation::PathNotAllowed => "path_not_allowed",
            ArgViolation::SuspiciousCharacters => "suspicious_characters",
            ArgViolation::EmptyCommand => "empty_command",
            ArgViolation::CommandPath => "path_in_command",
            ArgViolation::ShellOperator => "shell_operator",
            ArgViolation::CommandNotAllowed => "command_not_allowed",
        }
    }
}

/// Normalises an absolute path: `/a//b/./c/../d` is `/a/b/d`.
pub fn normalise(raw: &str) -> Result<String, ArgViolation> {
    let lower = raw.to_ascii_lowercase();
    if raw.chars().any(|c| c.is_control() || c == '\\') || lower.contains("%2e") || lower.contains("%2f") {
        return Err(ArgViolation::SuspiciousCharacters);
    }
    if !raw.starts_with('/') {
        return Err(ArgViolation::RelativePath);
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in raw.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(ArgViolation::EscapesRoot);
                }
            }
            s => parts.push(s),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// True when normalised `path` is `prefix` or below it.
pub fn within(path: &str, prefix: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'))
}

/// Checks a path argument against normalised prefixes.
pub fn check_path(raw: &str, allowed: &[String]) -> Result<(), ArgViolation> {
    let path = normalise(raw)?;
    if allowed.iter().any(|p| within(&path, p)) {
        Ok(())
    } else {
        Err(ArgViolation::PathNotAllowed)
    }
}

const SHELL_OPERATORS: [char; 7] = [';', '&', '|', '$', '`', '<', '>'];

/// Checks a command line (a string) or an argv (the items of an array).
pub fn check_command(words: &[&str], allowed: &[String]) -> Result<(), ArgViolation> {
    for w in words {
        if w.chars().any(|c| c.is_control() || c == '\\') {
            return Err(ArgViolation::SuspiciousCharacters);
        }
        if w.contains(SHELL_OPERATORS) {
            return Err(ArgViolation::ShellOperator);
        }
    }
    let first = match words {
        [single] => single.split_whitespace().next(),
        [first, ..] => Some(first.trim()),
        [] => None,
    };
    let first = first.filter(|f| !f.is_empty()).ok_or(ArgViolation::EmptyCommand)?;
    if first.contains('/') || first.contains('=') {
        return Err(ArgViolation::CommandPath);
    }
    if allowed.iter().any(|a| a == first) {
        Ok(())
    } else {
        Err(ArgViolation::CommandNotAllowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> Vec<String> {
        vec!["/srv/data".to_string(), "/tmp/work".to_string()]
    }

    #[test]
    fn traversal_is_blocked() {
        let a = allowed();
        assert_eq!(check_path("../../etc/passwd", &a), Err(ArgViolation::RelativePath));
        assert_eq!(check_path("/srv/data/../secret", &a), Err(ArgViolation::PathNotAllowed));
        assert_eq!(
            check_path("/srv/data/../../etc/passwd", &a),
            Err(ArgViolation::PathNotAllowed)
        );
        assert_eq!(check_path("/../etc/passwd", &a), Err(ArgViolation::EscapesRoot));
        assert_eq!(
            check_path("/srv/data/a/../../../../x", &a),
            Err(ArgViolation::EscapesRoot)
        );
        assert_eq!(check_path("/srv/database/x", &a), Err(ArgViolation::PathNotAllowed));
        assert_eq!(check_path("//etc/passwd", &a), Err(ArgViolation::PathNotAllowed));
        assert_eq!(
            check_path("/srv/data/%2e%2e/secret", &a),
            Err(ArgViolation::SuspiciousCharacters)
        );
        assert_eq!(
            check_path("/srv/data/..%2Fsecret", &a),
            Err(ArgViolation::SuspiciousCharacters)
        );
        assert_eq!(
            check_path("/srv/data/x\0.txt", &a),
            Err(ArgViolation::SuspiciousCharacters)
        );
        assert_eq!(
            check_path("/srv/data\\..\\secret", &a),
            Err(ArgViolation::SuspiciousCharacters)
        );
        assert_eq!(check_path("~/x", &a), Err(ArgViolation::RelativePath));
        assert_eq!(check_path("", &a), Err(ArgViolation::RelativePath));
        assert_eq!(check_path("C:/srv/data", &a), Err(ArgViolation::RelativePath));
    }

    #[test]
    fn allowed_paths_pass_after_normalising() {
        let a = allowed();
        for ok in [
            "/srv/data",
            "/srv/data/",
            "/srv/data/report.txt",
            "//srv//data///a/./b",
            "/srv/data/a/../b",
            "/tmp/work/x/..",
            "/srv/data/..hidden",
        ] {
            assert_eq!(check_path(ok, &a), Ok(()), "{ok}");
        }
        assert_eq!(normalise("//srv//data///a/./b/../c").unwrap(), "/srv/data/a/c");
        assert_eq!(normalise("/").unwrap(), "/");
        assert!(within("/anything", "/"));
    }

    #[test]
    fn commands_by_first_word_without_tricks() {
        let a = vec!["git".to_string(), "ls".to_string()];
        assert_eq!(check_command(&["git status"], &a), Ok(()));
        assert_eq!(check_command(&["  ls -la /srv"], &a), Ok(()));
        assert_eq!(check_command(&["git", "log", "--oneline"], &a), Ok(()));
        assert_eq!(check_command(&["rm -rf /"], &a), Err(ArgViolation::CommandNotAllowed));
        assert_eq!(
            check_command(&["/usr/bin/git status"], &a),
            Err(ArgViolation::CommandPath)
        );
        assert_eq!(check_command(&["./git"], &a), Err(ArgViolation::CommandPath));
        assert_eq!(
            check_command(&["/usr/bin/../bin/rm"], &a),
            Err(ArgViolation::CommandPath)
        );
        assert_eq!(check_command(&["PATH=/tmp git"], &a), Err(ArgViolation::CommandPath));
        assert_eq!(
            check_command(&["git status; rm -rf /"], &a),
            Err(ArgViolation::ShellOperator)
        );
        assert_eq!(
            check_command(&["git $(rm -rf /)"], &a),
            Err(ArgViolation::ShellOperator)
        );
        assert_eq!(check_command(&["ls | sh"], &a), Err(ArgViolation::ShellOperator));
        assert_eq!(check_command(&["ls `id`"], &a), Err(ArgViolation::ShellOperator));
        assert_eq!(check_command(&["ls > /etc/x"], &a), Err(ArgViolation::ShellOperator));
        assert_eq!(
            check_command(&["git\nrm -rf /"], &a),
            Err(ArgViolation::SuspiciousCharacters)
        );
        assert_eq!(check_command(&["git", "x;y"], &a), Err(ArgViolation::ShellOperator));
        assert_eq!(check_command(&["   "], &a), Err(ArgViolation::EmptyCommand));
        assert_eq!(check_command(&[], &a), Err(ArgViolation::EmptyCommand));
        assert_eq!(check_command(&["gitx"], &a), Err(ArgViolation::CommandNotAllowed));
    }

    proptest::proptest! {
        /// An accepted path, normalised, is under the allowed prefix and has no `..`.
        #[test]
        fn accepted_paths_stay_under_the_prefix(raw in "(/|//|\\.\\./|\\./|srv/|data/|%2e|x/|\\\\){0,10}") {
            let allowed = ["/srv/data".to_string()];
            if check_path(&raw, &allowed).is_ok() {
                let n = normalise(&raw).unwrap();
                proptest::prop_assert!(within(&n, "/srv/data"), "{raw:?} -> {n:?}");
                proptest::prop_assert!(!n.split('/').any(|s| s == ".."));
            }
        }
    }
}
