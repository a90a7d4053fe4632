//! The closed set of HLO opcodes and a declarative table of per-op facts.

/// How many operands an opcode takes (as the parser enforces it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exact(usize),
    AtLeast(usize),
    /// Any count, including zero.
    Variadic,
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exact(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Variadic => true,
        }
    }
}

/// Coarse families of ops, shared by the verifier, the interpreter and the cost model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpCategory {
    /// One operand, value-wise.
    Unary,
    /// Two operands of the same shape, value-wise.
    Binary,
    /// select, clamp.
    Ternary,
    /// Moves or reinterprets data without arithmetic.
    DataMovement,
    Reduction,
    Contraction,
    Control,
    Collective,
    Async,
    Io,
    Random,
    Other,
}

macro_rules! opcodes {
    ($( $variant:ident = $name:literal, $cat:ident, $arity:expr; )*) => {
        /// Every HLO opcode (HLO_GRAMMAR §5.8).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Opcode { $($variant),* }

        impl Opcode {
            /// All opcodes, in declaration order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant),*];

            /// The HLO spelling, e.g. `get-tuple-element`.
            pub fn name(self) -> &'static str {
                match self { $(Opcode::$variant => $name),* }
            }

            /// Looks an opcode up by its HLO spelling.
            pub fn from_name(name: &str) -> Option<Opcode> {
                match name {
                    $($name => Some(Opcode::$variant),)*
                    _ => None,
                }
            }

            pub fn category(self) -> OpCategory {
                match self { $(Opcode::$variant => OpCategory::$cat),* }
            }

            /// Operand count the parser accepts.
            pub fn arity(self) -> Arity {
                use Arity::*;
                match self { $(Opcode::$variant => $arity),* }
            }
        }
    };
}

opcodes! {
    Abs = "abs", Unary, Exact(1);
    Acos = "acos", Unary, Exact(1);
    Acosh = "acosh", Unary, Exact(1);
    Add = "add", Binary, Exact(2);
    AddDependency = "add-dependency", Other, Exact(2);
    AfterAll = "after-all", Other, Variadic;
    AllGather = "all-gather", Collective, AtLeast(1);
    AllGatherDone = "all-gather-done", Collective, Exact(1);
    AllGatherStart = "all-gather-start", Collective, AtLeast(1);
    AllReduce = "all-reduce", Collective, AtLeast(1);
    AllReduceDone = "all-reduce-done", Collective, Exact(1);
    AllReduceStart = "all-reduce-start", Collective, AtLeast(1);
    AllToAll = "all-to-all", Collective, AtLeast(1);
    And = "and", Binary, Exact(2);
    Asin = "asin", Unary, Exact(1);
    Asinh = "asinh", Unary, Exact(1);
    AsyncDone = "async-done", Async, Exact(1);
    AsyncStart = "async-start", Async, Variadic;
    AsyncUpdate = "async-update", Async, AtLeast(1);
    Atan = "atan", Unary, Exact(1);
    Atan2 = "atan2", Binary, Exact(2);
    Atanh = "atanh", Unary, Exact(1);
    BatchNormGrad = "batch-norm-grad", Other, Exact(5);
    BatchNormInference = "batch-norm-inference", Other, Exact(5);
    BatchNormTraining = "batch-norm-training", Other, Exact(3);
    Bitcast = "bitcast", DataMovement, Exact(1);
    BitcastConvert = "bitcast-convert", DataMovement, Exact(1);
    Broadcast = "broadcast", DataMovement, Exact(1);
    Call = "call", Control, Variadic;
    Cbrt = "cbrt", Unary, Exact(1);
    Ceil = "ceil", Unary, Exact(1);
    Cholesky = "cholesky", Other, Exact(1);
    Clamp = "clamp", Ternary, Exact(3);
    Clz = "count-leading-zeros", Unary, Exact(1);
    CollectiveBroadcast = "collective-broadcast", Collective, AtLeast(1);
    CollectivePermute = "collective-permute", Collective, AtLeast(1);
    CollectivePermuteDone = "collective-permute-done", Collective, Exact(1);
    CollectivePermuteStart = "collective-permute-start", Collective, AtLeast(1);
    CollectiveReduce = "collective-reduce", Collective, AtLeast(1);
    Compare = "compare", Binary, Exact(2);
    Complex = "complex", Binary, Exact(2);
    Concatenate = "concatenate", DataMovement, AtLeast(1);
    Conditional = "conditional", Control, AtLeast(1);
    Constant = "constant", Other, Exact(0);
    Convert = "convert", Unary, Exact(1);
    Convolution = "convolution", Contraction, AtLeast(2);
    Copy = "copy", DataMovement, Exact(1);
    CopyDone = "copy-done", DataMovement, Exact(1);
    CopyStart = "copy-start", DataMovement, Exact(1);
    Cos = "cosine", Unary, Exact(1);
    Cosh = "cosh", Unary, Exact(1);
    CustomCall = "custom-call", Other, Variadic;
    Divide = "divide", Binary, Exact(2);
    Domain = "domain", Other, Exact(1);
    Dot = "dot", Contraction, Exact(2);
    DynamicReshape = "dynamic-reshape", DataMovement, AtLeast(1);
    DynamicSlice = "dynamic-slice", DataMovement, AtLeast(2);
    DynamicUpdateSlice = "dynamic-update-slice", DataMovement, AtLeast(3);
    Erf = "erf", Unary, Exact(1);
    Exp = "exponential", Unary, Exact(1);
    Expm1 = "exponential-minus-one", Unary, Exact(1);
    Fft = "fft", Other, Exact(1);
    Floor = "floor", Unary, Exact(1);
    Fusion = "fusion", Control, Variadic;
    Gather = "gather", DataMovement, Exact(2);
    GetDimensionSize = "get-dimension-size", Other, Exact(1);
    GetTupleElement = "get-tuple-element", DataMovement, Exact(1);
    Imag = "imag", Unary, Exact(1);
    Infeed = "infeed", Io, Exact(1);
    Iota = "iota", DataMovement, Exact(0);
    IsFinite = "is-finite", Unary, Exact(1);
    Log = "log", Unary, Exact(1);
    Log1p = "log-plus-one", Unary, Exact(1);
    Logistic = "logistic", Unary, Exact(1);
    Map = "map", Other, Variadic;
    Maximum = "maximum", Binary, Exact(2);
    Minimum = "minimum", Binary, Exact(2);
    Mulhi = "mulhi", Binary, Exact(2);
    Multiply = "multiply", Binary, Exact(2);
    Negate = "negate", Unary, Exact(1);
    Not = "not", Unary, Exact(1);
    OptBarrier = "opt-barrier", Other, Exact(1);
    Or = "or", Binary, Exact(2);
    Outfeed = "outfeed", Io, Exact(2);
    Pad = "pad", DataMovement, Exact(2);
    Parameter = "parameter", Other, Exact(0);
    PartitionId = "partition-id", Other, Exact(0);
    Popcnt = "popcnt", Unary, Exact(1);
    Power = "power", Binary, Exact(2);
    RaggedAllToAll = "ragged-all-to-all", Collective, Exact(6);
    RaggedDot = "ragged-dot", Contraction, Exact(3);
    Real = "real", Unary, Exact(1);
    Recv = "recv", Io, Exact(1);
    RecvDone = "recv-done", Io, Exact(1);
    Reduce = "reduce", Reduction, AtLeast(2);
    ReducePrecision = "reduce-precision", Unary, Exact(1);
    ReduceScatter = "reduce-scatter", Collective, AtLeast(1);
    ReduceWindow = "reduce-window", Reduction, AtLeast(2);
    Remainder = "remainder", Binary, Exact(2);
    ReplicaId = "replica-id", Other, Exact(0);
    Reshape = "reshape", DataMovement, Exact(1);
    Reverse = "reverse", DataMovement, Exact(1);
    Rng = "rng", Random, AtLeast(2);
    RngBitGenerator = "rng-bit-generator", Random, Exact(1);
    RngGetAndUpdateState = "rng-get-and-update-state", Random, Exact(0);
    RoundNearestAfz = "round-nearest-afz", Unary, Exact(1);
    RoundNearestEven = "round-nearest-even", Unary, Exact(1);
    Rsqrt = "rsqrt", Unary, Exact(1);
    ScaledDot = "scaled-dot", Contraction, Exact(4);
    Scan = "scan", Control, AtLeast(1);
    Scatter = "scatter", DataMovement, AtLeast(3);
    Select = "select", Ternary, Exact(3);
    SelectAndScatter = "select-and-scatter", Reduction, Exact(3);
    Send = "send", Io, Exact(2);
    SendDone = "send-done", Io, Exact(1);
    SetDimensionSize = "set-dimension-size", Other, Exact(2);
    ShiftLeft = "shift-left", Binary, Exact(2);
    ShiftRightArithmetic = "shift-right-arithmetic", Binary, Exact(2);
    ShiftRightLogical = "shift-right-logical", Binary, Exact(2);
    Shuffle = "shuffle", DataMovement, Exact(1);
    Sign = "sign", Unary, Exact(1);
    Sin = "sine", Unary, Exact(1);
    Sinh = "sinh", Unary, Exact(1);
    Slice = "slice", DataMovement, Exact(1);
    Sort = "sort", Other, AtLeast(1);
    Sqrt = "sqrt", Unary, Exact(1);
    StochasticConvert = "stochastic-convert", Binary, Exact(2);
    Subtract = "subtract", Binary, Exact(2);
    Tan = "tan", Unary, Exact(1);
    Tanh = "tanh", Unary, Exact(1);
    TopK = "topk", Other, Exact(1);
    Transpose = "transpose", DataMovement, Exact(1);
    TriangularSolve = "triangular-solve", Other, Exact(2);
    Tuple = "tuple", DataMovement, Variadic;
    While = "while", Control, Exact(1);
    Xor = "xor", Binary, Exact(2);
}

impl Opcode {
    /// Transcendental unary ops (the ones that take `result_accuracy`).
    pub fn is_transcendental(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            Acos | Acosh
                | Asin
                | Asinh
                | Atan
                | Atanh
                | Cbrt
                | Cos
                | Cosh
                | Erf
                | Exp
                | Expm1
                | Log
                | Log1p
                | Logistic
                | Rsqrt
                | Sin
                | Sinh
                | Sqrt
                | Tan
                | Tanh
                | Atan2
                | Power
        )
    }

    /// Ops whose result is computed element by element from same-shaped operands.
    pub fn is_elementwise(self) -> bool {
        matches!(
            self.category(),
            OpCategory::Unary | OpCategory::Binary | OpCategory::Ternary
        ) || self == Opcode::Map
    }

    /// Real asynchronous pairs that are opcodes of their own (not async sugar).
    pub fn is_async_collective_start(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            AllGatherStart | AllReduceStart | CollectivePermuteStart | CopyStart | Send | Recv
        )
    }
}

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips() {
        for &op in Opcode::ALL {
            assert_eq!(Opcode::from_name(op.name()), Some(op), "{op:?}");
        }
    }

    #[test]
    fn spec_list_is_covered() {
        // HLO_GRAMMAR §5.8, verbatim.
        let spec = "abs, acos, acosh, add, add-dependency, after-all, all-gather, all-gather-done,
all-gather-start, all-reduce, all-reduce-done, all-reduce-start, all-to-all, and, asin,
asinh, async-done, async-start, async-update, atan, atan2, atanh, batch-norm-grad,
batch-norm-inference, batch-norm-training, bitcast, bitcast-convert, broadcast, call,
cbrt, ceil, cholesky, clamp, count-leading-zeros, collective-broadcast,
collective-permute, collective-permute-done, collective-permute-start,
collective-reduce, compare, complex, concatenate, conditional, constant, convert,
convolution, copy, copy-done, copy-start, cosine, cosh, custom-call, divide, domain, dot,
dynamic-reshape, dynamic-slice, dynamic-update-slice, erf, exponential,
exponential-minus-one, fft, floor, fusion, gather, get-dimension-size,
get-tuple-element, imag, infeed, iota, is-finite, log, log-plus-one, logistic, map,
maximum, minimum, mulhi, multiply, negate, not, opt-barrier, or, outfeed, pad,
parameter, partition-id, popcnt, power, ragged-all-to-all, ragged-dot, real, recv,
recv-done, reduce, reduce-precision, reduce-scatter, reduce-window, remainder,
replica-id, reshape, reverse, rng, rng-bit-generator, rng-get-and-update-state,
round-nearest-afz, round-nearest-even, rsqrt, scaled-dot, scan, scatter, select,
select-and-scatter, send, send-done, set-dimension-size, shift-left,
shift-right-arithmetic, shift-right-logical, shuffle, sign, sine, sinh, slice, sort,
sqrt, stochastic-convert, subtract, tan, tanh, topk, transpose, triangular-solve, tuple,
while, xor";
        let names: Vec<&str> = spec.split(',').map(str::trim).collect();
        for n in &names {
            assert!(Opcode::from_name(n).is_some(), "missing opcode {n}");
        }
        assert_eq!(names.len(), Opcode::ALL.len());
    }
}
