//! HBM in use over a step, in the shape the views draw, built from the
//! memory model's profile ([`tpusim_perf::MemoryProfile`]) or from the
//! summary an [`Analysis`] carries.

use tpusim_perf::{Analysis, KindAtPeak, LiveBuffer, MemoryProfile};

/// HBM in use over one step of one device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryView {
    /// A step function: `bytes` are in use from `time_s` until the next
    /// point's time (and until the end of the step for the last one).
    pub points: Vec<MemoryPoint>,
    pub peak_bytes: f64,
    pub peak_time_s: f64,
    /// HBM capacity of one device.
    pub capacity_bytes: f64,
    /// The largest buffers live at the peak, largest first.
    pub buffers_at_peak: Vec<MemoryBuffer>,
    /// What the peak is made of: each kind of buffer, most bytes first.
    pub by_kind: Vec<KindAtPeak>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryPoint {
    pub time_s: f64,
    pub bytes: f64,
}

/// A buffer live at the peak.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryBuffer {
    /// The instruction that defines it.
    pub name: String,
    /// Its shape as HLO prints it (`f32[1024,512]`).
    pub shape: String,
    pub bytes: f64,
    /// What it holds (`parameter`, `output`, `temporary`, ...).
    pub kind: String,
}

impl MemoryView {
    /// From the profile of a replay (`tpusim_perf::schedule_with_memory`).
    pub fn from_profile(p: &MemoryProfile, max_buffers: usize) -> MemoryView {
        MemoryView {
            points: p.timeline.iter().map(point).collect(),
            peak_bytes: p.peak_bytes as f64,
            peak_time_s: p.peak_time_s,
            capacity_bytes: p.capacity_bytes as f64,
            buffers_at_peak: p
                .peak_buffers
                .iter()
                .take(max_buffers)
                .map(buffer)
                .collect(),
            by_kind: tpusim_perf::peak_by_kind(&p.peak_buffers),
        }
    }

    /// From the memory summary of an analysis; `None` when it has none.
    pub fn from_analysis(a: &Analysis) -> Option<MemoryView> {
        if a.memory_timeline.is_empty() {
            return None;
        }
        Some(MemoryView {
            points: a.memory_timeline.iter().map(point).collect(),
            peak_bytes: a.peak_memory_bytes as f64,
            peak_time_s: a.memory.peak_time_s,
            capacity_bytes: a.memory.capacity_bytes as f64,
            buffers_at_peak: a.memory.peak_buffers.iter().map(buffer).collect(),
            by_kind: a.memory.peak_by_kind.clone(),
        })
    }

    /// At most about `max` points with the same envelope: each bucket of
    /// consecutive points keeps its first point and its highest one, so the
    /// peak always survives.
    pub fn downsampled(&self, max: usize) -> Vec<MemoryPoint> {
        let n = self.points.len();
        if n <= max.max(2) {
            return self.points.clone();
        }
        let per = n.div_ceil(max.max(2) / 2);
        let mut out = Vec::with_capacity(max + 1);
        for chunk in self.points.chunks(per) {
            let first = chunk[0];
            out.push(first);
            let high = chunk
                .iter()
                .copied()
                .max_by(|a, b| a.bytes.total_cmp(&b.bytes))
                .unwrap_or(first);
            if high != first {
                out.push(high);
            }
        }
        out
    }
}

fn point(p: &tpusim_perf::MemoryPoint) -> MemoryPoint {
    MemoryPoint {
        time_s: p.time_s,
        bytes: p.bytes as f64,
    }
}

fn buffer(b: &LiveBuffer) -> MemoryBuffer {
    MemoryBuffer {
        name: b.name.clone(),
        shape: b.shape.clone(),
        bytes: b.bytes as f64,
        kind: b.kind.name().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_the_peak_and_bounds_the_size() {
        let points: Vec<MemoryPoint> = (0..10_000)
            .map(|k| MemoryPoint {
                time_s: k as f64,
                bytes: if k == 4321 { 1e9 } else { (k % 97) as f64 },
            })
            .collect();
        let v = MemoryView {
            points,
            ..MemoryView::default()
        };
        let d = v.downsampled(500);
        assert!(d.len() <= 501, "{}", d.len());
        assert!(d.iter().any(|p| p.bytes == 1e9));
        assert!(d.windows(2).all(|w| w[0].time_s < w[1].time_s));
        assert_eq!(v.downsampled(20_000).len(), 10_000);
    }
}
