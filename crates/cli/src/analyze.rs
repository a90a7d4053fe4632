//! `tpusim analyze`: performance of a module on one chip, or on a pod of
//! chips when it is sharded (collectives priced by `tpusim-pod`).

use crate::input;
use crate::out;
use crate::render::{bytes, seconds, table};
use anyhow::Result;
use tpusim_hlo::Cancel;
use tpusim_perf::{Analysis, Bound, LocalOnly};
use tpusim_pod::{Network, PodModel, PodOptions};

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin); every module in it is analyzed
    file: String,
    #[command(flatten)]
    chip: ChipArgs,
    /// How values of an unpartitioned module without a sharding get one
    #[arg(long, value_enum, default_value_t)]
    propagation: input::Propagation,
    /// Print the analysis as JSON (an array when the file holds several modules)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pod: PodArgs,
    /// Also print how the TensorCore model timed the op named OP (tiles,
    /// fill/drain cycles, DMA bytes per tile, the bound of each phase)
    #[arg(long, value_name = "OP")]
    explain: Option<String>,
    #[command(flatten)]
    compile: CompileArgs,
}

/// Whether the TPU compiler passes run before pricing (shared by `analyze`, `trace`).
#[derive(clap::Args, Default)]
pub struct CompileArgs {
    /// Price the module untouched (it is already what XLA:TPU compiled): no
    /// fusion, combining, async conversion or scheduling by tpusim
    #[arg(long)]
    as_given: bool,
    /// Reschedule a module that is already scheduled (is_scheduled=true)
    #[arg(long, conflicts_with = "as_given")]
    reschedule: bool,
    /// Decompose each all-gather read by a dot into a collective matmul whose
    /// chunks overlap (XLA:TPU's --xla_tpu_decompose_all_gather_einsum)
    #[arg(long, conflicts_with = "as_given")]
    collective_matmul: bool,
}

impl CompileArgs {
    /// Compiles (unless --as-given) and analyzes `m`.
    pub fn analyze(
        &self,
        m: &tpusim_hlo::Module,
        chip: &tpusim_arch::Chip,
        comm: &dyn tpusim_perf::CommModel,
        cancel: &Cancel,
    ) -> Result<(tpusim_compile::Prepared, Analysis)> {
        let mode = if self.as_given {
            tpusim_compile::Mode::AsGiven
        } else {
            tpusim_compile::Mode::Compile
        };
        let opts = tpusim_compile::CompileOptions {
            reschedule: self.reschedule,
            collective_matmul: self.collective_matmul,
            cancel: cancel.clone(),
            ..Default::default()
        };
        Ok(tpusim_compile::analyze(m, chip, comm, mode, &opts)?)
    }
}

/// The chip to simulate (shared by `analyze` and `trace`).
#[derive(clap::Args)]
pub struct ChipArgs {
    /// Chip to simulate (see `tpusim chips` for the ids)
    #[arg(long, value_name = "NAME", required_unless_present = "chip_file")]
    chip: Option<String>,
    /// Simulate a chip described in a TOML file instead (`tpusim chips --json` prints the fields to copy)
    #[arg(long, value_name = "FILE", conflicts_with = "chip")]
    chip_file: Option<String>,
}

impl ChipArgs {
    /// The builtin chip or the one described in the file.
    pub fn load(&self) -> Result<tpusim_arch::Chip> {
        Ok(match (&self.chip, &self.chip_file) {
            (_, Some(path)) => tpusim_arch::from_path(std::path::Path::new(path))?,
            (Some(id), None) => tpusim_arch::by_id(id)?,
            (None, None) => anyhow::bail!("give --chip NAME or --chip-file FILE"),
        })
    }
}

/// The pod a sharded module runs on (shared by `analyze` and `trace`).
#[derive(clap::Args)]
pub struct PodArgs {
    /// Chips per axis of the slice, e.g. 4x4 or 4x4x4 (default: the module's
    /// devices spread over the chip's torus axes)
    #[arg(long, value_name = "SHAPE")]
    topology: Option<String>,
    /// Slices joined over DCN (at least 1)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    slices: u32,
    /// How collectives are priced: the scaling book's formulas, or an
    /// event-driven simulation of every link
    #[arg(long, value_enum, default_value_t = NetworkArg::Analytic)]
    network: NetworkArg,
    /// Place device ids on the torus: one line per device id holding its chip
    /// coordinates, then optionally the device within the chip and the slice
    #[arg(long, value_name = "FILE")]
    device_order: Option<String>,
    /// The logical mesh the module's device ids number, major axis first (e.g.
    /// 16x48x8 for a `Mesh` of shape (16, 48, 8)): devices are placed as JAX's
    /// create_device_mesh lays that mesh on each slice. Read from the
    /// shardings when tpusim partitions the module itself
    #[arg(long, value_name = "SHAPE", conflicts_with = "device_order")]
    mesh: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum NetworkArg {
    Analytic,
    Sim,
}

impl PodArgs {
    /// The interconnect model for `m`, or `None` for a single-device run.
    pub fn model(
        &self,
        chip: &tpusim_arch::Chip,
        m: &tpusim_hlo::Module,
        mesh: Option<&[u32]>,
        cancel: &Cancel,
    ) -> Result<Option<PodModel>> {
        let device_order = match &self.device_order {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?,
            ),
            None => None,
        };
        let mesh = match &self.mesh {
            Some(text) => Some(given_mesh(text, m)?),
            None => mesh.map(<[u32]>::to_vec),
        };
        let opts = PodOptions {
            topology: self.topology.clone(),
            slices: self.slices,
            network: match self.network {
                NetworkArg::Analytic => Network::Analytic,
                NetworkArg::Sim => Network::Sim,
            },
            device_order,
            mesh,
            cancel: cancel.clone(),
        };
        opts.model_for(chip, m)
            .map_err(|e| match (&self.device_order, e) {
                (Some(path), e @ tpusim_pod::PodError::DeviceOrder { .. }) => {
                    anyhow::anyhow!("{path}: {e}")
                }
                (_, e) => e.into(),
            })
    }
}

/// The `--mesh` shape, checked against the module's devices.
fn given_mesh(text: &str, m: &tpusim_hlo::Module) -> Result<Vec<u32>> {
    let axes: Vec<u32> = text
        .split('x')
        .map(|a| a.trim().parse::<u32>().ok().filter(|&n| n >= 1))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "bad --mesh `{text}`: write the mesh's axis sizes, major first, such as 16x48x8"
            )
        })?;
    tpusim_pod::check_given_mesh(&axes, m).map_err(|e| anyhow::anyhow!("--mesh: {e}"))?;
    Ok(axes)
}

/// Rows of the op table.
const TOP_OPS: usize = 15;

pub fn run(args: &Args) -> Result<bool> {
    // From here on Ctrl-C only sets the flag: the work stops at the next
    // check (a pass, an instruction, a loop iteration, a batch of network
    // events) and `main` exits 130.
    let cancel = crate::interrupt::cancel();
    let chip = args.chip.load()?;
    let mut modules = Vec::new();
    for (m, _) in input::load(&args.file)? {
        modules.push(input::partition_if_needed(m, &cancel, args.propagation)?);
    }
    let mut models = Vec::new();
    for p in &modules {
        models.push(
            args.pod
                .model(&chip, &p.module, p.mesh.as_deref(), &cancel)?,
        );
    }
    let priced: Vec<(tpusim_compile::Prepared, Analysis)> =
        crate::progress::with_spinner("simulating", || {
            modules
                .iter()
                .zip(&models)
                .map(|(p, model)| {
                    let comm: &dyn tpusim_perf::CommModel = match model {
                        Some(pod) => pod,
                        None => &LocalOnly,
                    };
                    let (prepared, mut a) =
                        args.compile.analyze(&p.module, &chip, comm, &cancel)?;
                    a.assumptions.splice(0..0, p.notes.iter().cloned());
                    Ok((prepared, a))
                })
                .collect::<Result<_>>()
        })?;
    let analyses: Vec<&Analysis> = priced.iter().map(|(_, a)| a).collect();
    if args.json {
        let text = match analyses.as_slice() {
            [one] => serde_json::to_string_pretty(one)?,
            many => serde_json::to_string_pretty(many)?,
        };
        out::line(text);
        return Ok(true);
    }
    for (k, a) in analyses.iter().enumerate() {
        if k > 0 {
            out::line("");
        }
        report(a, &chip.name);
    }
    if let Some(op) = &args.explain {
        let mut found = false;
        // The op as priced: in the program tpusim's compiler made (or the input with --as-given).
        for (prepared, _) in &priced {
            let timed = tpusim_perf::timed_module(&prepared.module);
            if let Some(lines) = tpusim_perf::tensorcore::explain_op(timed.module(), &chip, op) {
                found = true;
                out::line("");
                lines.into_iter().for_each(out::line);
            }
        }
        if !found {
            anyhow::bail!("--explain: no op named `{op}` in {}", args.file);
        }
    }
    Ok(true)
}

/// The pod a module runs on: `None` for a single-device module analyzed
/// without `--topology`.
pub(crate) fn report(a: &Analysis, chip_name: &str) {
    let plural = if a.devices == 1 { "" } else { "s" };
    out::line(format!(
        "{} on {chip_name} ({} device{plural})",
        a.module, a.devices
    ));
    if let Some(net) = &a.communication.network {
        out::line(format!("  topology         {net}"));
    }
    out::line(format!("  step time        {}", seconds(a.step_time_s)));
    out::line(format!(
        "  flops            {:.4e} (XLA static count: {:.4e})",
        a.flops, a.xla_cost.flops
    ));
    out::line(format!(
        "  transcendentals  {:.4e} (XLA static count: {:.4e})",
        a.transcendentals, a.xla_cost.transcendentals
    ));
    out::line(format!(
        "  bytes accessed   {:.4e} (XLA static count: {:.4e})",
        a.bytes_accessed, a.xla_cost.bytes_accessed
    ));
    out::line(format!(
        "  MFU              {:.1}% of {} peak ({})",
        100.0 * a.mfu,
        a.mfu_dtype.name(),
        rate(a.peak_flops_per_s, "FLOP/s")
    ));
    let pct = |t: f64| {
        if a.step_time_s > 0.0 {
            100.0 * t / a.step_time_s
        } else {
            0.0
        }
    };
    let by_bound: Vec<String> = a
        .time_by_bound
        .iter()
        .map(|(b, t)| format!("{} {:.1}%", b.name(), pct(*t)))
        .collect();
    out::line(format!("  time by bound    {}", by_bound.join(", ")));
    let mut cats: Vec<_> = a.time_by_category.iter().collect();
    cats.sort_by(|x, y| y.1.total_cmp(x.1));
    let by_cat: Vec<String> = cats
        .iter()
        .map(|(c, t)| format!("{} {:.1}%", c.name(), pct(**t)))
        .collect();
    out::line(format!("  time by category {}", by_cat.join(", ")));
    communication(a);
    if !a.assumptions.is_empty() {
        out::line("assumptions:");
        for s in &a.assumptions {
            out::line(format!("  - {s}"));
        }
    }
    if a.ops.is_empty() {
        out::line("no ops to time");
    } else {
        let mut t = table(&[
            "op",
            "category",
            "runs",
            "time",
            "% step",
            "FLOP/s",
            "HBM B/s",
            "FLOP/byte",
            "bound",
        ]);
        for o in a.ops.iter().take(TOP_OPS) {
            let per_s = |x: f64| if o.time_s > 0.0 { x / o.time_s } else { 0.0 };
            let ai = o.arithmetic_intensity();
            crate::render::add_row(
                &mut t,
                vec![
                    o.name.clone(),
                    o.category.name().to_string(),
                    o.occurrences.to_string(),
                    seconds(o.time_s),
                    format!("{:.1}", pct(o.time_s)),
                    rate(per_s(o.flops), "FLOP/s"),
                    rate(per_s(o.bytes_accessed), "B/s"),
                    if ai.is_finite() {
                        format!("{ai:.1}")
                    } else {
                        "-".to_string()
                    },
                    bound_name(o.bound).to_string(),
                ],
            );
        }
        out::line(&t);
        if a.ops.len() > TOP_OPS {
            out::line(format!(
                "({} more ops, {:.1}% of step)",
                a.ops.len() - TOP_OPS,
                pct(a.ops[TOP_OPS..].iter().fold(0.0, |s, o| s + o.time_s))
            ));
        }
    }
    memory_section(a);
    if !a.hints.is_empty() {
        out::line("hints:");
        for h in &a.hints {
            out::line(format!("  - {h}"));
        }
    }
}

/// Rows of the collectives table.
const TOP_COLLECTIVES: usize = 10;

/// Compute vs communication per device, and the longest collectives.
fn communication(a: &Analysis) {
    let c = &a.communication;
    if c.collectives.is_empty() {
        return;
    }
    out::line("communication (per device):");
    out::line(format!("  compute          {}", seconds(c.compute_s)));
    out::line(format!("  communication    {}", seconds(c.communication_s)));
    out::line(format!(
        "  exposed          {} ({} hidden behind compute)",
        seconds(c.exposed_communication_s),
        seconds((c.communication_s - c.exposed_communication_s).max(0.0))
    ));
    let mut t = table(&[
        "collective",
        "kind",
        "bytes",
        "group",
        "axes",
        "runs",
        "time",
        "exposed",
    ]);
    for s in c.collectives.iter().take(TOP_COLLECTIVES) {
        crate::render::add_row(
            &mut t,
            vec![
                s.name.clone(),
                if s.is_async {
                    format!("{} (async)", s.kind)
                } else {
                    s.kind.clone()
                },
                crate::render::bytes(s.bytes as u64),
                s.group_size.to_string(),
                s.axes.join(","),
                s.occurrences.to_string(),
                seconds(s.time_s),
                seconds(s.exposed_s),
            ],
        );
    }
    out::line(&t);
    if c.collectives.len() > TOP_COLLECTIVES {
        out::line(format!(
            "({} more collectives)",
            c.collectives.len() - TOP_COLLECTIVES
        ));
    }
}

/// Peak HBM use, what makes it up, and the largest buffers at the peak.
fn memory_section(a: &Analysis) {
    let m = &a.memory;
    let share = if m.capacity_bytes > 0 {
        format!(
            " ({:.1}% of {} HBM)",
            100.0 * a.peak_memory_bytes as f64 / m.capacity_bytes as f64,
            bytes(m.capacity_bytes)
        )
    } else {
        String::new()
    };
    out::line("memory:");
    out::line(format!(
        "  peak HBM in use  {}{share} at {}",
        bytes(a.peak_memory_bytes),
        seconds(m.peak_time_s)
    ));
    if !m.peak_by_kind.is_empty() {
        out::line(format!("  made of          {}", made_of(&m.peak_by_kind)));
    }
    let mut parts = format!(
        "  parameters {}, outputs {}, constants {}",
        bytes(m.parameter_bytes),
        bytes(m.output_bytes),
        bytes(m.constant_bytes)
    );
    if m.aliased_bytes > 0 {
        parts += &format!(
            " ({} of outputs written into donated parameters)",
            bytes(m.aliased_bytes)
        );
    }
    out::line(parts);
    if m.peak_buffers.is_empty() {
        return;
    }
    let mut t = table(&["live at peak", "shape", "kind", "bytes"]);
    for b in &m.peak_buffers {
        crate::render::add_row(
            &mut t,
            vec![
                b.name.clone(),
                b.shape.clone(),
                b.kind.name().to_string(),
                bytes(b.bytes),
            ],
        );
    }
    out::line(&t);
    if m.peak_buffer_count > m.peak_buffers.len() {
        out::line(format!(
            "({} more buffers live at the peak)",
            m.peak_buffer_count - m.peak_buffers.len()
        ));
    }
}

/// `59.2 GiB in 338 temporary buffers, 11.2 GiB in 881 parameter buffers`.
fn made_of(kinds: &[tpusim_perf::KindAtPeak]) -> String {
    let parts: Vec<String> = kinds.iter().map(|k| k.phrase(bytes)).collect();
    parts.join(", ")
}

fn bound_name(b: Bound) -> &'static str {
    b.name()
}

/// `1.97e14`, `"FLOP/s"` -> `197.0 TFLOP/s`.
fn rate(v: f64, unit: &str) -> String {
    const PREFIXES: [(f64, &str); 5] =
        [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in PREFIXES {
        if v >= scale {
            return format!("{:.1} {p}{unit}", v / scale);
        }
    }
    format!("{v:.1} {unit}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_units() {
        assert_eq!(super::seconds(0.00123), "1.230 ms");
        assert_eq!(super::seconds(2.5e-7), "250.000 ns");
        assert_eq!(super::rate(1.97e14, "FLOP/s"), "197.0 TFLOP/s");
        assert_eq!(super::rate(8.2e11, "B/s"), "820.0 GB/s");
        assert_eq!(super::rate(0.0, "B/s"), "0.0 B/s");
    }
}
