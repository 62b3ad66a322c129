//! The agent programs: each reference agent's flags and start-up, as
//! functions of their command line. The binaries `auth-agent`,
//! `ratelimit-agent`, `guardrail-agent`, `tool-agent` and `planner-agent`
//! each run one; `reference-agents` runs any of them (`reference-agents auth
//! --socket=…`, or through a link named after the agent), so that one build
//! gives all five.
//!
//! One program per file; a program registers its group's policies on an SDK
//! [`Agent`](policy_agents::Agent) and serves it on a Unix socket.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

mod approvals;
pub mod auth;
pub mod guardrail;
pub mod planner;
pub mod ratelimit;
pub mod tool;

/// A program's entry point: its command line, the program name first.
type Main = fn(Vec<OsString>) -> anyhow::Result<ExitCode>;

/// The programs `reference-agents` runs: (short name, binary name, entry).
pub const PROGRAMS: [(&str, &str, Main); 5] = [
    ("auth", "auth-agent", auth::main),
    ("ratelimit", "ratelimit-agent", ratelimit::main),
    ("guardrail", "guardrail-agent", guardrail::main),
    ("tool", "tool-agent", tool::main),
    ("planner", "planner-agent", planner::main),
];

fn find(name: &str) -> Option<(&'static str, Main)> {
    PROGRAMS
        .iter()
        .find(|(short, bin, _)| name == *short || name == *bin)
        .map(|(_, bin, main)| (*bin, *main))
}

/// Runs the program the command line names: by the name it was called by (a
/// link named `auth-agent`), else by its first argument (`reference-agents
/// auth --socket=…`). An unknown or missing name prints the programs and
/// exits with 2, as a usage error of any of them does.
pub fn dispatch(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    match resolve(args) {
        Ok((main, args)) => main(args),
        Err(usage) => {
            eprintln!("{usage}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The program to run and its command line, or the usage error.
fn resolve(mut args: Vec<OsString>) -> Result<(Main, Vec<OsString>), String> {
    let called = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .and_then(find);
    if let Some((_, main)) = called {
        return Ok((main, args));
    }
    let names = PROGRAMS.map(|(short, _, _)| short).join(", ");
    let Some(first) = args.get(1).map(|a| a.to_string_lossy().into_owned()) else {
        return Err(format!(
            "usage: reference-agents <AGENT> [FLAGS], AGENT one of {names}; `reference-agents <AGENT> --help` lists its flags"
        ));
    };
    let Some((bin, main)) = find(&first) else {
        return Err(format!(
            "reference-agents: no agent named {first:?}; AGENT is one of {names}"
        ));
    };
    // The program sees its own name first, as when run as its own binary.
    args.splice(0..2, [OsString::from(bin)]);
    Ok((main, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn every_program_is_found_by_either_name() {
        for (short, bin, _) in PROGRAMS {
            assert_eq!(find(short).map(|f| f.0), Some(bin));
            assert_eq!(find(bin).map(|f| f.0), Some(bin));
        }
        assert!(find("example").is_none());
    }

    #[test]
    fn an_unknown_or_missing_agent_is_an_error_naming_the_choices() {
        let e = resolve(args(&["reference-agents"])).err().unwrap_or_default();
        assert!(e.contains("auth, ratelimit, guardrail, tool, planner"), "{e}");
        let e = resolve(args(&["/usr/bin/reference-agents", "nope", "--socket=x"]))
            .err()
            .unwrap_or_default();
        assert!(e.contains("no agent named \"nope\""), "{e}");
    }

    #[test]
    fn the_program_gets_its_own_name_then_the_rest() {
        let Ok((main, rest)) = resolve(args(&["reference-agents", "tool", "--socket=/s", "-v"])) else {
            panic!("tool not found");
        };
        assert_eq!(main as usize, tool::main as Main as usize);
        assert_eq!(rest, args(&["tool-agent", "--socket=/s", "-v"]));
        // Called through a link named after the agent: the line as it is.
        let Ok((main, rest)) = resolve(args(&["/opt/bin/planner-agent", "--socket=/s"])) else {
            panic!("planner-agent not found");
        };
        assert_eq!(main as usize, planner::main as Main as usize);
        assert_eq!(rest, args(&["/opt/bin/planner-agent", "--socket=/s"]));
    }

    #[test]
    fn each_program_names_itself_in_its_usage() {
        for (short, bin, _) in PROGRAMS {
            let usage = usage(short);
            assert!(usage.contains(bin), "{short}: {usage}");
        }
    }

    fn usage(short: &str) -> String {
        use clap::CommandFactory;
        let mut cmd = match short {
            "auth" => auth::Args::command(),
            "ratelimit" => ratelimit::Args::command(),
            "guardrail" => guardrail::Args::command(),
            "tool" => tool::Args::command(),
            _ => planner::Args::command(),
        };
        cmd.clone().debug_assert();
        cmd.render_usage().to_string()
    }
}
