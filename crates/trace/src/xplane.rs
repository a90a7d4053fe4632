//! prost messages for `proto/xplane.proto` (package `tensorflow.profiler`),
//! written out as `prost-build` would generate them so that no protoc is
//! needed to build. A test checks the tags against the `.proto`.

use std::collections::BTreeMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct XSpace {
    #[prost(message, repeated, tag = "1")]
    pub planes: Vec<XPlane>,
    #[prost(string, repeated, tag = "2")]
    pub errors: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub warnings: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub hostnames: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlane {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "3")]
    pub lines: Vec<XLine>,
    // Ordered maps: the encoded bytes must not depend on hash order.
    #[prost(btree_map = "int64, message", tag = "4")]
    pub event_metadata: BTreeMap<i64, XEventMetadata>,
    #[prost(btree_map = "int64, message", tag = "5")]
    pub stat_metadata: BTreeMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XLine {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(int64, tag = "10")]
    pub display_id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "11")]
    pub display_name: String,
    #[prost(int64, tag = "3")]
    pub timestamp_ns: i64,
    #[prost(int64, tag = "9")]
    pub duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    pub events: Vec<XEvent>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XEvent {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(oneof = "x_event::Data", tags = "2, 5")]
    pub data: Option<x_event::Data>,
    #[prost(int64, tag = "3")]
    pub duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    pub stats: Vec<XStat>,
}

pub mod x_event {
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub enum Data {
        #[prost(int64, tag = "2")]
        OffsetPs(i64),
        #[prost(int64, tag = "5")]
        NumOccurrences(i64),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XStat {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(oneof = "x_stat::Value", tags = "2, 3, 4, 5, 6, 7, 8")]
    pub value: Option<x_stat::Value>,
}

pub mod x_stat {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(double, tag = "2")]
        DoubleValue(f64),
        #[prost(uint64, tag = "3")]
        Uint64Value(u64),
        #[prost(int64, tag = "4")]
        Int64Value(i64),
        #[prost(string, tag = "5")]
        StrValue(String),
        #[prost(bytes, tag = "6")]
        BytesValue(Vec<u8>),
        #[prost(uint64, tag = "7")]
        RefValue(u64),
        #[prost(bytes, tag = "8")]
        CompressedStrValue(Vec<u8>),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XEventMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub display_name: String,
    #[prost(bytes, tag = "3")]
    pub metadata: Vec<u8>,
    #[prost(message, repeated, tag = "5")]
    pub stats: Vec<XStat>,
    #[prost(int64, repeated, tag = "6")]
    pub child_id: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XStatMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub description: String,
}

/// A TPU device plane's `core_details` stat (xprof's `op_stats.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CoreDetails {
    #[prost(string, tag = "1")]
    pub hostname: String,
    #[prost(uint32, tag = "2")]
    pub device_ordinal: u32,
    #[prost(uint32, tag = "3")]
    pub core_num: u32,
    #[prost(uint32, tag = "4")]
    pub local_chip_id: u32,
    #[prost(uint32, tag = "5")]
    pub global_chip_id: u32,
    #[prost(uint32, tag = "6")]
    pub global_core_id: u32,
    #[prost(bool, tag = "7")]
    pub is_sparse_core: bool,
}

/// An op's `memory_access_breakdown` stat (xprof's `op_metrics.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryAccessBreakdown {
    #[prost(message, repeated, tag = "1")]
    pub memory_accessed: Vec<MemoryAccessed>,
}

/// `OpMetrics.MemoryAccessed`: bytes one op moves in one memory space.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryAccessed {
    /// 1: read, 2: write.
    #[prost(int32, tag = "1")]
    pub operation_type: i32,
    /// 1: HBM.
    #[prost(uint64, tag = "2")]
    pub memory_space: u64,
    #[prost(uint64, tag = "3")]
    pub bytes_accessed: u64,
}
