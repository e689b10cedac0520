//! The plugin entry point: env + stdin -> verb -> stdout, with every rule of Go's skel
//! (which env vars each verb needs, name/containerID/ifname validation, version gates,
//! the error JSON and exit status 1). Env and IO are injectable for tests.

use crate::error::{Error, code};
use crate::version::{self, Version};
use std::io::{Read, Write};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use sysproc::goquote::{quote, quote_list};
use sysproc::netns::{Netns, NetnsError};

/// `eprintln!` for plugins: one line on stderr (where plugin logs go), dropped when stderr
/// is gone. `eprintln!` panics then (EPIPE once the runtime that started us died), which
/// would abort a rollback or a DEL half-way.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}

/// What a plugin gets for one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CmdArgs {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// Raw CNI_ARGS; see [`crate::args`].
    pub args: String,
    /// Raw CNI_PATH (`:`-separated; see [`crate::invoke::split_cni_path`]).
    pub path: String,
    pub stdin_data: Vec<u8>,
    /// CNI_NETNS, opened once for the call (by skel's own-netns check, else by the verb's
    /// first [`open_netns`](Self::open_netns)).
    pub opened_netns: sysproc::netns::OpenOnce,
    /// The config's `cniVersion`, parsed once by skel (a verb only ever sees a supported
    /// one: [`version::SUPPORTED`], each printed by `Version` exactly as written; an empty
    /// or absent `cniVersion` is 0.1.0).
    pub version: Version,
}

impl CmdArgs {
    /// CNI_NETNS as an open namespace (Go `ns.GetNS`), opened once per call: every caller
    /// gets the same file, or the same error.
    pub fn open_netns(&self) -> Result<std::sync::Arc<Netns>, NetnsError> {
        self.opened_netns.open(&self.netns)
    }
}

/// A plugin's verbs. ADD returns its result; skel prints it at the config's version.
pub trait Plugin {
    /// ADD, up to what skel prints: the result JSON, rendered once by the plugin (most at
    /// the config's version, `CniResult::to_json_at(args.version)`; loopback in the
    /// reference's own shape), so a plugin that must roll back a result that cannot be
    /// rendered learns it before it returns.
    fn add(&self, args: &CmdArgs) -> Result<String, Error>;
    fn del(&self, args: &CmdArgs) -> Result<(), Error>;
    fn check(&self, args: &CmdArgs) -> Result<(), Error>;
    fn status(&self, args: &CmdArgs) -> Result<(), Error>;
    fn gc(&self, args: &CmdArgs) -> Result<(), Error>;
}

/// Where a call's input comes from and its output goes.
pub struct Io<'a> {
    pub getenv: &'a dyn Fn(&str) -> Option<String>,
    pub stdin: &'a mut dyn Read,
    pub stdout: &'a mut dyn Write,
    pub stderr: &'a mut dyn Write,
}

/// Runs the plugin on the real process env and stdio, then exits with its status.
pub fn plugin_main(plugin: &dyn Plugin, about: &str) -> ! {
    sysproc::step::start();
    install_panic_hook();
    let getenv = |k: &str| std::env::var(k).ok();
    let (mut stdin, mut stdout, mut stderr) =
        (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let status = run(
        plugin,
        about,
        Io {
            getenv: &getenv,
            stdin: &mut stdin,
            stdout: &mut stdout,
            stderr: &mut stderr,
        },
    );
    sysproc::step::finish();
    std::process::exit(status)
}

/// One plugin invocation; returns the exit status (0, or 1 after printing the error JSON).
pub fn run(plugin: &dyn Plugin, about: &str, io: Io<'_>) -> i32 {
    match dispatch(plugin, about, io.getenv, io.stdin, io.stdout, io.stderr) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(io.stdout, "{}", e.to_json());
            1
        }
    }
}

/// A panic is a bug, but the runtime must still get an error JSON, not an empty reply (the
/// release build aborts on panic: the hook runs before the abort). The default hook still
/// writes the panic to stderr.
fn install_panic_hook() {
    static PRINTED: AtomicBool = AtomicBool::new(false);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // One reply only, even if several threads panic.
        if !PRINTED.swap(true, Ordering::SeqCst) {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            let error = panic_error(message, info.location());
            let mut stdout = std::io::stdout();
            let _ = writeln!(stdout, "{}", error.to_json());
            let _ = stdout.flush();
        }
        default_hook(info);
    }));
}

/// The error a panic is reported as: 999, "internal error: <panic message>", the location
/// in `details`.
pub fn panic_error(message: Option<&str>, location: Option<&Location<'_>>) -> Error {
    let error = Error::internal(format!(
        "internal error: {}",
        message.unwrap_or("panic with a non-string payload")
    ));
    match location {
        Some(at) => error.with_details(format!("panicked at {at}")),
        None => error,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verb {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Verb {
    fn parse(s: &str) -> Option<Verb> {
        Some(match s {
            "ADD" => Verb::Add,
            "DEL" => Verb::Del,
            "CHECK" => Verb::Check,
            "STATUS" => Verb::Status,
            "GC" => Verb::Gc,
            "VERSION" => Verb::Version,
            _ => return None,
        })
    }

    /// Whether this verb needs the variable (CNI_COMMAND is always needed).
    fn requires(self, var: &str) -> bool {
        use Verb::*;
        match var {
            "CNI_CONTAINERID" | "CNI_IFNAME" => matches!(self, Add | Del | Check),
            "CNI_NETNS" => matches!(self, Add | Check),
            "CNI_PATH" => matches!(self, Add | Del | Check | Status | Gc),
            _ => false,
        }
    }

    /// The lowest config version that may use this verb.
    fn min_config_version(self) -> Option<Version> {
        match self {
            Verb::Check => Some(Version::V0_4_0),
            Verb::Status | Verb::Gc => Some(Version::V1_1_0),
            _ => None,
        }
    }
}

const ENV_VARS: [&str; 5] = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_PATH",
];

fn dispatch(
    plugin: &dyn Plugin,
    about: &str,
    getenv: &dyn Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<(), Error> {
    let env = |k: &str| getenv(k).unwrap_or_default();
    let command = env("CNI_COMMAND");
    if command.is_empty() && !about.is_empty() {
        let _ = writeln!(stderr, "{about}");
        let _ = writeln!(
            stderr,
            "CNI protocol versions supported: {}",
            version::SUPPORTED.join(", ")
        );
        return Ok(());
    }
    let verb = Verb::parse(&command);
    let missing: Vec<&str> = ENV_VARS
        .iter()
        .copied()
        .filter(|v| {
            env(v).is_empty() && (*v == "CNI_COMMAND" || verb.is_some_and(|verb| verb.requires(v)))
        })
        .collect();
    if !missing.is_empty() {
        return Err(Error::invalid_env(format!(
            "required env variables [{}] missing",
            missing.join(",")
        )));
    }
    if verb == Some(Verb::Version) {
        // stdin is ignored for VERSION, as in Go.
        return stdout
            .write_all(version::version_json().as_bytes())
            .map_err(|e| Error::new(code::IO_FAILURE, e.to_string()));
    }
    // Bounded: Go reads stdin without end (`/dev/zero` as stdin exhausts the node).
    let stdin_data =
        crate::file::read_bounded(stdin, crate::file::MAX_CONFIG).map_err(|e| match e {
            crate::file::ReadError::TooLarge { .. } => Error::invalid_config(format!(
                "error reading from stdin: the network configuration {e}"
            )),
            e => Error::new(code::IO_FAILURE, format!("error reading from stdin: {e}")),
        })?;
    let head = ConfigHead::parse(&stdin_data)?;
    validate_network_name(head.name.as_deref().unwrap_or_default())?;
    let Some(verb) = verb else {
        return Err(Error::invalid_env(format!(
            "unknown CNI_COMMAND: {command}"
        )));
    };
    let config_version = head.version()?;
    let (container_id, ifname) = (env("CNI_CONTAINERID"), env("CNI_IFNAME"));
    if verb.requires("CNI_CONTAINERID") {
        validate_container_id(&container_id)?;
        validate_ifname(&ifname)?;
    }
    let version = check_version(verb, &config_version)?;
    let args = CmdArgs {
        container_id,
        netns: env("CNI_NETNS"),
        ifname,
        args: env("CNI_ARGS"),
        path: env("CNI_PATH"),
        version,
        stdin_data,
        opened_netns: Default::default(),
    };
    if matches!(verb, Verb::Add | Verb::Del | Verb::Check)
        && !netns_override(&env("CNI_NETNS_OVERRIDE"))
    {
        refuse_own_netns(&args)?;
    }
    match verb {
        Verb::Add => {
            let json = plugin.add(&args)?;
            stdout
                .write_all(json.as_bytes())
                .map_err(|e| Error::new(code::IO_FAILURE, e.to_string()))
        }
        Verb::Del => plugin.del(&args),
        Verb::Check => plugin.check(&args),
        Verb::Status => plugin.status(&args),
        Verb::Gc => plugin.gc(&args),
        Verb::Version => unreachable!("handled above"),
    }
}

/// The two keys skel reads from every config, decoded in one pass.
#[derive(serde::Deserialize)]
struct ConfigHead {
    #[serde(default)]
    name: Option<String>,
    #[serde(rename = "cniVersion", default)]
    cni_version: Option<serde_json::Value>,
}

impl ConfigHead {
    fn parse(stdin: &[u8]) -> Result<ConfigHead, Error> {
        crate::gojson::from_slice(stdin)
            .map_err(|e| Error::decoding(format!("error unmarshall network config: {e}")))
    }

    /// The config's version; absent or empty reads as 0.1.0.
    fn version(&self) -> Result<String, Error> {
        match &self.cni_version {
            None | Some(serde_json::Value::Null) => Ok("0.1.0".into()),
            Some(serde_json::Value::String(s)) if s.is_empty() => Ok("0.1.0".into()),
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(Error::decoding(format!(
                "decoding version from network config: cniVersion {other} is not a string"
            ))),
        }
    }
}

/// Go skel's version gates; the config's version, parsed once, when it passes them.
fn check_version(verb: Verb, config_version: &str) -> Result<Version, Error> {
    let name = format!("{verb:?}").to_uppercase();
    let parsed = Version::parse(config_version);
    if let Some(min) = verb.min_config_version() {
        let config = parsed.clone()?;
        if config < min {
            return Err(Error::new(
                code::INCOMPATIBLE_CNI_VERSION,
                format!("config version does not allow {name}"),
            ));
        }
        let mut plugin_ok = false;
        for v in version::SUPPORTED {
            plugin_ok |= Version::parse(v)? >= config;
        }
        if !plugin_ok {
            return Err(Error::new(
                code::INCOMPATIBLE_CNI_VERSION,
                format!("plugin version does not allow {name}"),
            ));
        }
    }
    if !version::is_supported(config_version) {
        return Err(
            Error::new(code::INCOMPATIBLE_CNI_VERSION, "incompatible CNI versions").with_details(
                format!(
                    "config is {}, plugin supports {}",
                    quote(config_version),
                    quote_list(version::SUPPORTED)
                ),
            ),
        );
    }
    // A supported version always parses.
    parsed
}

fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Go `utils.ValidateNetworkName`.
pub fn validate_network_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_config("missing network name"));
    }
    if !is_valid_name(name) {
        return Err(
            Error::invalid_config("invalid characters found in network name").with_details(name),
        );
    }
    Ok(())
}

/// Go `utils.ValidateContainerID`.
pub fn validate_container_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::new(code::UNKNOWN_CONTAINER, "missing containerID"));
    }
    if !is_valid_name(id) {
        return Err(Error::invalid_env("invalid characters in containerID").with_details(id));
    }
    Ok(())
}

/// Go `utils.ValidateInterfaceName`.
pub fn validate_ifname(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_env("interface name is empty"));
    }
    if name.len() > 15 {
        return Err(Error::invalid_env("interface name is too long")
            .with_details("interface name should be less than 16 characters"));
    }
    if name == "." || name == ".." {
        return Err(Error::invalid_env("interface name is . or .."));
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(Error::invalid_env(
            "interface name contains / or : or whitespace characters",
        ));
    }
    Ok(())
}

fn netns_override(v: &str) -> bool {
    v == "1" || v.eq_ignore_ascii_case("true")
}

/// Refuses a CNI_NETNS that is the plugin's own namespace: ADD would configure, and DEL
/// would delete, interfaces of the host. Checked before the verb runs (Go checks after);
/// a path that cannot be opened as a netns is left to the plugin (DEL must tolerate it).
/// The namespace opened here is the one the verb gets ([`CmdArgs::open_netns`]).
fn refuse_own_netns(args: &CmdArgs) -> Result<(), Error> {
    if !args.netns.is_empty()
        && args
            .open_netns()
            .is_ok_and(|ns| ns.is_current().unwrap_or(false))
    {
        return Err(Error::new(
            code::INVALID_NETNS,
            "plugin's netns and netns from CNI_NETNS should not be the same",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
