//! cnitool: run a CNI network configuration list against a network namespace by hand.
//! Same command line, environment, container IDs and cache files as the Go cnitool.

#![forbid(unsafe_code)]

mod container_id;
mod settings;

use clap::{Args, Parser, Subcommand};
use libcni::runtime::{
    CniConfig, DEFAULT_CACHE_DIR, NetworkConfigList, RuntimeConf, go_marshal, go_marshal_indent,
    load_network_conf,
};
use libcni::types::GcAttachment;
use settings::Settings;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

const ENV_HELP: &str = "\
Environment:
  NETCONFPATH    directory of network configs (*.conflist, *.conf, *.json) [default: /etc/cni/net.d]
  CNI_PATH       plugin directories, separated by ':'
  CNI_ARGS       extra plugin arguments, 'K=V;K2=V2'
  CAP_ARGS       capability arguments as a JSON object, e.g. '{\"mac\":\"c2:11:22:33:44:55\"}';
                 each plugin gets those its \"capabilities\" enable, as runtimeConfig
  CNI_IFNAME     interface name when -i is not given [default: eth0]
  CNI_CACHE_DIR  result cache directory when --cache-dir is not given [default: /var/lib/cni]

The container ID is 'cnitool-' + the first 20 hex digits of sha512(absolute netns path),
as with the Go cnitool, so either tool can undo what the other did.";

#[derive(Parser)]
#[command(
    name = "cnitool",
    version,
    about = "CNI Tool for managing network interfaces in a network namespace",
    long_about = "CNI Tool executes a CNI network configuration list: it adds, checks, removes, \
garbage-collects or gets the status of an interface in an already-created network namespace.",
    after_help = ENV_HELP
)]
struct Cli {
    /// Interface name (defaults to env var CNI_IFNAME or 'eth0')
    #[arg(short, long, global = true)]
    ifname: Option<String>,
    /// Result cache directory (defaults to env var CNI_CACHE_DIR or /var/lib/cni)
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Target {
    /// Name of the network (the "name" of a config in NETCONFPATH)
    network: String,
    /// Path of the network namespace, e.g. /var/run/netns/testing
    netns: String,
}

#[derive(Subcommand)]
enum Command {
    /// Add network interface to a network namespace and print the result
    #[command(after_help = ENV_HELP)]
    Add {
        #[command(flatten)]
        target: Target,
        /// Print the result as one line of JSON instead of indented
        #[arg(short, long)]
        compact: bool,
    },
    /// Check that the interface is still as ADD left it
    #[command(after_help = ENV_HELP)]
    Check {
        #[command(flatten)]
        target: Target,
    },
    /// Remove network interface from a network namespace
    #[command(after_help = ENV_HELP)]
    Del {
        #[command(flatten)]
        target: Target,
    },
    /// Garbage-collect: delete every cached attachment of the network (or those not
    /// listed with --valid), then send GC to the plugins
    #[command(after_help = ENV_HELP)]
    Gc {
        /// Name of the network
        network: String,
        /// Ignored; accepted for compatibility with the Go cnitool
        netns: Option<String>,
        /// Attachment to keep, as CONTAINERID:IFNAME (repeatable); plugins then get the
        /// list as cni.dev/valid-attachments
        #[arg(long, value_name = "CONTAINERID:IFNAME")]
        valid: Vec<String>,
    },
    /// Ask the plugins whether they are ready for ADD (exit 0 when ready)
    #[command(after_help = ENV_HELP)]
    Status {
        /// Name of the network
        network: String,
        /// Ignored; accepted for compatibility with the Go cnitool
        netns: Option<String>,
    },
    /// Check that every plugin of the network is found and supports its version;
    /// prints the capabilities the network enables
    #[command(after_help = ENV_HELP)]
    Validate {
        /// Name of the network
        network: String,
    },
}

/// Configs may nest as deep as Go accepts (10,000 levels), and loading, copying and writing
/// one recurses once per level (up to ~7 KiB in a debug build): more than a main thread has.
const STACK_SIZE: usize = 256 << 20;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = std::thread::Builder::new()
        .name("cnitool".into())
        .stack_size(STACK_SIZE)
        .spawn(move || run(cli))
        .map_err(|e| BoxError::from(format!("cannot start the cnitool thread: {e}")))
        .and_then(|t| {
            t.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when stderr is a closed pipe.
            let _ = writeln!(std::io::stderr(), "Error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Any error of a command, kept whole until it is printed (it crosses the thread boundary).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn run(cli: Cli) -> Result<(), BoxError> {
    let settings = Settings::from_env(|k| std::env::var(k).ok())?;
    let cache_dir = cli
        .cache_dir
        .or_else(|| settings.cache_dir.clone())
        .unwrap_or_else(|| DEFAULT_CACHE_DIR.into());
    let cni = CniConfig::with_cache_dir(settings.cni_path.clone(), cache_dir);
    let ifname = cli
        .ifname
        .filter(|i| !i.is_empty())
        .or_else(|| settings.ifname.clone())
        .unwrap_or_else(|| "eth0".into());
    let load = |network: &str| load_network_conf(&settings.netconf_path, network);
    let runtime_conf = |target: &Target| -> Result<(NetworkConfigList, RuntimeConf), BoxError> {
        let list = load(&target.network)?;
        let netns = container_id::absolute(&target.netns, &std::env::current_dir()?);
        let rt = RuntimeConf {
            container_id: container_id::container_id(&netns),
            netns,
            ifname: ifname.clone(),
            args: settings.args.clone(),
            capability_args: settings.capability_args.clone(),
        };
        Ok((list, rt))
    };
    match cli.command {
        Command::Add { target, compact } => {
            let (list, rt) = runtime_conf(&target)?;
            let (_, value) = cni.add_network_list_rendered(&list, &rt)?;
            print_result(&value, compact)?;
        }
        Command::Check { target } => {
            let (list, rt) = runtime_conf(&target)?;
            cni.check_network_list(&list, &rt)?;
        }
        Command::Del { target } => {
            let (list, rt) = runtime_conf(&target)?;
            cni.del_network_list(&list, &rt)?;
        }
        Command::Gc { network, valid, .. } => {
            let list = load(&network)?;
            let valid = if valid.is_empty() {
                None
            } else {
                Some(
                    valid
                        .iter()
                        .map(|v| parse_attachment(v))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            };
            cni.gc_network_list(&list, valid.as_deref())?;
        }
        Command::Status { network, .. } => {
            cni.get_status_network_list(&load(&network)?)?;
        }
        Command::Validate { network } => {
            let caps = cni.validate_network_list(&load(&network)?)?;
            let mut out = std::io::stdout().lock();
            for c in caps {
                writeln!(out, "{c}")?;
            }
        }
    }
    Ok(())
}

/// Go prints the result indented with four spaces and no newline; a newline is added
/// for a terminal, where the prompt would otherwise follow the closing brace.
fn print_result(value: &serde_json::Value, compact: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if compact {
        writeln!(out, "{}", go_marshal(value))?;
    } else {
        write!(out, "{}", go_marshal_indent(value))?;
        if out.is_terminal() {
            writeln!(out)?;
        }
    }
    out.flush()
}

fn parse_attachment(s: &str) -> Result<GcAttachment, String> {
    match s.split_once(':') {
        Some((id, ifname)) if !id.is_empty() && !ifname.is_empty() => Ok(GcAttachment {
            container_id: id.into(),
            ifname: ifname.into(),
        }),
        _ => Err(format!("invalid --valid {s:?}: want CONTAINERID:IFNAME")),
    }
}
