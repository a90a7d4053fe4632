//! `tpusim partition`: the per-device module tpusim's SPMD partitioner makes of
//! an unpartitioned sharded module (what `jax.jit(...).lower(...)` prints).

use crate::input;
use crate::out;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin); every module in it is partitioned
    file: String,
    /// Devices to partition for (default: the module's num_partitions, else its Shardy mesh size)
    #[arg(long, value_name = "N")]
    devices: Option<u32>,
    /// How values without a sharding get one
    #[arg(long, value_enum, default_value_t)]
    propagation: input::Propagation,
    /// Print the module with the sharding factor propagation gives every value,
    /// before partitioning
    #[arg(long, conflicts_with_all = ["propagation"])]
    shardings: bool,
}

pub fn run(args: &Args) -> Result<bool> {
    let cancel = crate::interrupt::cancel();
    let modules = input::load(&args.file)?;
    let options = tpusim_spmd::PartitionOptions {
        num_devices: args.devices,
        cancel,
        propagation: args.propagation.into(),
    };
    for (m, _) in &modules {
        let run = match args.shardings {
            true => tpusim_spmd::propagate_shardings,
            false => tpusim_spmd::partition,
        };
        let p = run(m, &options).map_err(|e| match e {
            tpusim_spmd::SpmdError::Cancelled(c) => anyhow::Error::new(c),
            e => anyhow::anyhow!("{}: {e}", input::display_name(&args.file)),
        })?;
        out::line(tpusim_hlo::print_module(&p).trim_end());
    }
    Ok(true)
}
