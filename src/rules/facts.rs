//! Typed facts (DESIGN.md section 3): what the log itself states, parsed from rule captures.
//!
//! Capture names are the contract between rules and facts: `requested`, `total`, `free`,
//! `allocated`, `reserved` (sizes such as `86.00 MiB`), `device`, `dtype`, `shape`, `rank`,
//! `gpu`, `torch_version`, `cuda_version`, `driver_version`, `nccl_version`, `arch`. A name may
//! carry a `_1`/`_2` suffix so one pattern can capture two of a kind; values are taken in the
//! order they appear in the line.

use serde::{Deserialize, Serialize};

/// GPU memory figures, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Bytes the failed allocation asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_bytes: Option<u64>,
    /// Total capacity of the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Free memory at the time of the failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// Memory allocated by PyTorch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_bytes: Option<u64>,
    /// Memory reserved by PyTorch's caching allocator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
}

impl Memory {
    fn is_empty(&self) -> bool {
        *self == Memory::default()
    }
}

/// Facts stated by the log. Keys are present only when the log states them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// GPU memory figures of an out-of-memory message.
    #[serde(default, skip_serializing_if = "Memory::is_empty")]
    pub memory: Memory,
    /// Devices named by a mismatch, in message order (`cuda:0`, `cpu`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// Dtypes named by a mismatch, `[expected, actual]` where the message says which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dtypes: Vec<String>,
    /// Shapes named by a mismatch, dimensions joined by `x` (conv: weight, then input).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<String>,
    /// Distributed ranks involved, ascending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<u32>,
    /// The rank whose line is the root cause (`[rank3]:`, `[Rank 3]`, `process rank 3`): the
    /// rank that failed first while the others report its consequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_rank: Option<u32>,
    /// The host the root-cause line comes from (a pdsh-style `node-7: ` label, NCCL's line
    /// head, `hostname=`, `on node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_host: Option<String>,
    /// The GPU the root-cause line names: `cuda:N` for a device index (`GPU 3`, `GPU=3`,
    /// `cuda:3`, NCCL's `[3]`), or a PCI bus id (`0000:3b:00.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_gpu: Option<String>,
    /// GPU model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Compute capability (`sm_86`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// PyTorch version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_version: Option<String>,
    /// CUDA (toolkit or runtime) version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// NVIDIA driver version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// NCCL version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<String>,
}

/// Which typed fact a capture feeds (the capture-name contract above), so a rule's preview can
/// say what each named group of its pattern becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactKind {
    Requested,
    Total,
    Free,
    Allocated,
    Reserved,
    Device,
    Dtype,
    Shape,
    Rank,
    Gpu,
    Arch,
    TorchVersion,
    CudaVersion,
    DriverVersion,
    NcclVersion,
}

impl FactKind {
    /// Every kind, in the order of [`Facts`]' fields.
    pub const ALL: [FactKind; 15] = [
        FactKind::Requested,
        FactKind::Total,
        FactKind::Free,
        FactKind::Allocated,
        FactKind::Reserved,
        FactKind::Device,
        FactKind::Dtype,
        FactKind::Shape,
        FactKind::Rank,
        FactKind::Gpu,
        FactKind::Arch,
        FactKind::TorchVersion,
        FactKind::CudaVersion,
        FactKind::DriverVersion,
        FactKind::NcclVersion,
    ];

    /// The fact a capture named `name` feeds (`device_2` → `Device`); `None` for names that
    /// only fill advice placeholders.
    #[must_use]
    pub fn of_capture(name: &str) -> Option<FactKind> {
        let name = canonical_name(name);
        FactKind::ALL.into_iter().find(|k| k.capture_name() == name)
    }

    /// The capture name (without a `_N` suffix) that feeds this fact.
    #[must_use]
    pub fn capture_name(self) -> &'static str {
        match self {
            FactKind::Requested => "requested",
            FactKind::Total => "total",
            FactKind::Free => "free",
            FactKind::Allocated => "allocated",
            FactKind::Reserved => "reserved",
            FactKind::Device => "device",
            FactKind::Dtype => "dtype",
            FactKind::Shape => "shape",
            FactKind::Rank => "rank",
            FactKind::Gpu => "gpu",
            FactKind::Arch => "arch",
            FactKind::TorchVersion => "torch_version",
            FactKind::CudaVersion => "cuda_version",
            FactKind::DriverVersion => "driver_version",
            FactKind::NcclVersion => "nccl_version",
        }
    }

    /// Where the fact appears in the classification's `facts` (DESIGN.md section 3).
    #[must_use]
    pub fn json_key(self) -> &'static str {
        match self {
            FactKind::Requested => "memory.requested_bytes",
            FactKind::Total => "memory.total_bytes",
            FactKind::Free => "memory.free_bytes",
            FactKind::Allocated => "memory.allocated_bytes",
            FactKind::Reserved => "memory.reserved_bytes",
            FactKind::Device => "devices",
            FactKind::Dtype => "dtypes",
            FactKind::Shape => "shapes",
            FactKind::Rank => "ranks",
            FactKind::Gpu => "gpu",
            FactKind::Arch => "arch",
            FactKind::TorchVersion => "torch_version",
            FactKind::CudaVersion => "cuda_version",
            FactKind::DriverVersion => "driver_version",
            FactKind::NcclVersion => "nccl_version",
        }
    }
}

impl std::fmt::Display for FactKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.json_key())
    }
}

/// The fact name a capture group stands for: `device_2` → `device`.
pub fn canonical_name(name: &str) -> &str {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if trimmed.len() < name.len() {
        trimmed.strip_suffix('_').unwrap_or(trimmed)
    } else {
        name
    }
}

impl Facts {
    /// Whether a list fact (`device`, `dtype`, `shape`) is already filled, so a later finding
    /// does not mix its values into the root cause's.
    pub fn has_list(&self, name: &str) -> bool {
        match name {
            "device" => !self.devices.is_empty(),
            "dtype" => !self.dtypes.is_empty(),
            "shape" => !self.shapes.is_empty(),
            _ => false,
        }
    }

    /// Records one captured value under its canonical name. Scalars keep the first value seen
    /// (the root cause's); lists append. Unknown names are ignored (they feed advice only).
    pub fn record(&mut self, name: &str, value: &str) {
        let value = value.trim();
        if value.is_empty() {
            return;
        }
        let first = |slot: &mut Option<String>, v: String| {
            if slot.is_none() {
                *slot = Some(v);
            }
        };
        let first_bytes = |slot: &mut Option<u64>| {
            if slot.is_none() {
                *slot = parse_bytes(value);
            }
        };
        match canonical_name(name) {
            "requested" => first_bytes(&mut self.memory.requested_bytes),
            "total" => first_bytes(&mut self.memory.total_bytes),
            "free" => first_bytes(&mut self.memory.free_bytes),
            "allocated" => first_bytes(&mut self.memory.allocated_bytes),
            "reserved" => first_bytes(&mut self.memory.reserved_bytes),
            "device" => self.devices.push(normalize_device(value)),
            "dtype" => self.dtypes.push(normalize_dtype(value)),
            "shape" => {
                if let Some(s) = normalize_shape(value) {
                    self.shapes.push(s);
                }
            }
            "rank" => {
                if let Ok(r) = value.parse() {
                    self.add_rank(r);
                }
            }
            "gpu" => first(&mut self.gpu, value.to_owned()),
            "arch" => first(&mut self.arch, value.to_owned()),
            "torch_version" => first(&mut self.torch_version, value.to_owned()),
            "cuda_version" => first(&mut self.cuda_version, value.to_owned()),
            "driver_version" => first(&mut self.driver_version, value.to_owned()),
            "nccl_version" => first(&mut self.nccl_version, value.to_owned()),
            _ => {}
        }
    }

    /// Keeps where the root cause happened (see `rules::origin`); its rank joins `ranks`.
    pub fn set_origin(&mut self, origin: super::origin::Origin) {
        if let Some(r) = origin.rank {
            self.add_rank(r);
        }
        self.failing_rank = origin.rank;
        self.failing_host = origin.host;
        self.failing_gpu = origin.gpu;
    }

    /// Adds a rank, keeping the list sorted and unique.
    pub fn add_rank(&mut self, rank: u32) {
        if let Err(at) = self.ranks.binary_search(&rank) {
            self.ranks.insert(at, rank);
        }
    }
}

/// `86.00 MiB` → 90177536. Binary units (KiB, MiB, GiB, TiB; `KB`/`MB`/`GB` as PyTorch,
/// TensorFlow and Paddle print them are binary too; Kubernetes' `Mi`/`Gi`; `MBytes`,
/// `gigabytes`), or plain bytes (`4770354232 bytes`, `3206250496B`, `1,073,741,824 B`).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let (number, unit) = split_size(text)?;
    let power = unit_power(&unit)?;
    finite_bytes(number * 1024f64.powi(power))
}

/// The readings of a size whose unit may be decimal or binary (`8 GB` is 8·2³⁰ bytes from
/// PyTorch and 8·10⁹ from a tool that counts like a disk vendor): both, binary first; one for a
/// unit that says which (`GiB`, `bytes`).
pub fn bytes_both_ways(text: &str) -> Vec<u64> {
    let Some((number, unit)) = split_size(text) else {
        return Vec::new();
    };
    let Some(power) = unit_power(&unit) else {
        return Vec::new();
    };
    let mut out: Vec<u64> = finite_bytes(number * 1024f64.powi(power))
        .into_iter()
        .collect();
    let ambiguous = power > 0 && !unit.contains('i');
    if ambiguous && let Some(decimal) = finite_bytes(number * 1000f64.powi(power)) {
        out.push(decimal);
    }
    out
}

/// Whether a byte count the engine read (`got`, with binary units) states the size `want` is
/// printed as, reading an ambiguous unit on either side both ways, within the rounding of a
/// printed figure (0.5%): a runtime's `24.00 GB` that meant GiB, labelled `25.77 GB`.
pub fn bytes_agree(got: u64, want: &str) -> bool {
    let close = |a: f64, b: f64| a == b || (b > 0.0 && ((a - b) / b).abs() <= 0.005);
    let wants = bytes_both_ways(want);
    let power = split_size(want)
        .and_then(|(_, unit)| unit_power(&unit))
        .unwrap_or(0);
    let got = got as f64;
    // The engine reads `GB` as binary; had the log meant decimal (in the label's unit), the
    // same figure read decimal.
    let gots = [got, got * (1000.0f64 / 1024.0).powi(power)];
    gots.into_iter()
        .any(|g| wants.iter().any(|&w| close(g, w as f64)))
}

fn split_size(text: &str) -> Option<(f64, String)> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(text.len());
    let number: f64 = text[..split].replace(',', "").parse().ok()?;
    Some((number, text[split..].trim().to_ascii_lowercase()))
}

/// The power of 1024 (or 1000) a lowercased unit stands for.
fn unit_power(unit: &str) -> Option<i32> {
    let unit = unit.trim_end_matches('.');
    let power = match unit {
        "" | "b" | "bytes" | "byte" => 0,
        "k" | "kb" | "kib" | "ki" | "kbytes" | "kilobytes" => 1,
        "m" | "mb" | "mib" | "mi" | "mbytes" | "megabytes" => 2,
        "g" | "gb" | "gib" | "gi" | "gbytes" | "gigabytes" => 3,
        "t" | "tb" | "tib" | "ti" | "tbytes" | "terabytes" => 4,
        _ => return None,
    };
    Some(power)
}

fn finite_bytes(bytes: f64) -> Option<u64> {
    let bytes = bytes.round();
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// `torch.cuda.FloatTensor` → `cuda`, `torch.FloatTensor` → `cpu`, `cuda:0` stays.
fn normalize_device(value: &str) -> String {
    let v = value.trim_matches(|c: char| c == '\'' || c == '"' || c == '`');
    if v.starts_with("torch.") && v.ends_with("Tensor") {
        return if v.starts_with("torch.cuda.") {
            "cuda"
        } else {
            "cpu"
        }
        .to_owned();
    }
    if v.ends_with("Type") {
        for (prefix, device) in [("CUDA", "cuda"), ("CPU", "cpu"), ("MPS", "mps")] {
            if v.starts_with(prefix) {
                return device.to_owned();
            }
        }
    }
    v.to_owned()
}

/// A dtype as the log spells it, without PyTorch's wrappers: `torch.cuda.HalfTensor`,
/// `HalfTensor`, `c10::Half` and `CUDAHalfType` → `Half`; `torch.float16` → `float16`. Plain
/// names keep the framework's spelling (`double` from TensorFlow, `float32` from NumPy/JAX, `f32`
/// or `bf16` from XLA), so the fact reads as the message does.
pub fn normalize_dtype(value: &str) -> String {
    let v = value.trim_matches(|c: char| c == '\'' || c == '"' || c == '`');
    // ONNX Runtime names a tensor type `tensor(int64)`: the element type is inside.
    let v = v
        .strip_prefix("tensor(")
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(v);
    let v = v.rsplit(['.', ':']).next().unwrap_or(v);
    let v = v.strip_suffix("Tensor").unwrap_or(v);
    let v = match v.strip_suffix("Type") {
        Some(t) => ["CUDA", "CPU", "MPS"]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .unwrap_or(t),
        None => v,
    };
    // An XLA array type (`f32[3,4]`) names its element type before the dimensions.
    v.split('[').next().unwrap_or(v).to_owned()
}

/// A shape with its dimensions joined by `x`, signs kept: `[1152, 3, 14, 14]`, `128 4 2 2`,
/// `77x768`, `torch.Size([4, 10])`, `(1041,)`, XLA's `f32[1,24]` → `1152x3x14x14`, ..., `1x24`;
/// `[-1, 768]` → `-1x768`. A scalar (`[]`, `()`) has no dimensions and gives `None`.
pub fn normalize_shape(value: &str) -> Option<String> {
    // Whatever precedes the first bracket is a type (`f32`, `torch.Size`), not a dimension;
    // ONNX Runtime prints shapes in braces (`{1,3,224,224}`).
    let inner = match value.find(['[', '(', '{']) {
        Some(open) => &value[open..],
        None => value,
    };
    // `None` and `?` are dimensions TensorFlow and Keras do not know yet; `77x768` is split too.
    let dims: Vec<&str> = inner
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '?'))
        .flat_map(|token| match token {
            "None" | "?" => vec![token],
            _ => token.split('x').collect(),
        })
        .map(|d| d.trim_end_matches('-'))
        .filter(|d| *d == "None" || *d == "?" || (!d.is_empty() && d.parse::<i64>().is_ok()))
        .collect();
    (!dims.is_empty()).then(|| dims.join("x"))
}

/// JAX prints two pytrees of array types when a loop carry or a `cond` branch changes type
/// (`State(x=ShapedArray(float32[]), ...)` and the same with `int64[]`). Captures named
/// `tree_1` and `tree_2` hold the two; this turns them into the facts of their first differing
/// leaf: `dtype_1`/`dtype_2` when the element types differ, else `shape_1`/`shape_2`. Other
/// captures pass through unchanged.
pub fn expand_type_trees(captures: Vec<(String, String)>) -> Vec<(String, String)> {
    let tree = |n: &str| {
        captures
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    let derived = match (tree("tree_1"), tree("tree_2")) {
        (Some(a), Some(b)) => first_differing_leaf(a, b),
        _ => None,
    };
    let mut out: Vec<(String, String)> = captures
        .iter()
        .filter(|(k, _)| canonical_name(k) != "tree")
        .cloned()
        .collect();
    if let Some((kind, a, b)) = derived {
        out.push((format!("{kind}_1"), a));
        out.push((format!("{kind}_2"), b));
    }
    out
}

/// The array-type leaves (`float32[19,7,3]`, `int64[]`, `bf16[2]`) of a printed pytree, in
/// order, as (element type, dimensions).
fn type_leaves(tree: &str) -> Vec<(&str, &str)> {
    let mut leaves = Vec::new();
    let mut rest = tree;
    while let Some(open) = rest.find('[') {
        let before = &rest[..open];
        let name_start = before
            .rfind(|c: char| !c.is_ascii_alphanumeric())
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let dims = &after[..close];
        let is_type = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.ends_with(|c: char| c.is_ascii_digit() || c == 'l')
            && dims
                .chars()
                .all(|c| c.is_ascii_digit() || c == ',' || c == ' ');
        if is_type {
            leaves.push((name, dims));
        }
        rest = &after[close + 1..];
    }
    leaves
}

fn first_differing_leaf(a: &str, b: &str) -> Option<(&'static str, String, String)> {
    let (la, lb) = (type_leaves(a), type_leaves(b));
    if la.len() != lb.len() {
        return None;
    }
    let (x, y) = la.iter().zip(&lb).find(|(x, y)| x != y)?;
    if x.0 != y.0 {
        Some(("dtype", x.0.to_owned(), y.0.to_owned()))
    } else {
        Some(("shape", format!("[{}]", x.1), format!("[{}]", y.1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_kind_is_a_capture_name_that_facts_record() {
        for kind in FactKind::ALL {
            let value = match kind {
                FactKind::Requested
                | FactKind::Total
                | FactKind::Free
                | FactKind::Allocated
                | FactKind::Reserved => "2.00 GiB",
                FactKind::Shape => "[4, 10]",
                FactKind::Rank => "3",
                _ => "x1",
            };
            let mut facts = Facts::default();
            facts.record(&format!("{}_2", kind.capture_name()), value);
            assert_ne!(facts, Facts::default(), "{kind}");
            assert_eq!(FactKind::of_capture(kind.capture_name()), Some(kind));
        }
        assert_eq!(FactKind::of_capture("dtype_1"), Some(FactKind::Dtype));
        assert_eq!(FactKind::of_capture("code"), None);
        assert_eq!(FactKind::Requested.to_string(), "memory.requested_bytes");
    }

    #[test]
    fn sizes_become_bytes() {
        let cases = [
            ("86.00 MiB", Some(90_177_536)),
            ("14.75 GiB", Some(15_837_691_904)),
            ("235.06 MiB", Some(246_478_275)),
            ("512 bytes", Some(512)),
            ("2.00 KiB", Some(2048)),
            ("1.5 TiB", Some(1_649_267_441_664)),
            ("1,024 B", Some(1024)),
            ("lots", None),
            ("12 parsecs", None),
            ("40Gi", Some(42_949_672_960)),
            ("512 MBytes", Some(536_870_912)),
            ("3206250496B", Some(3_206_250_496)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_bytes(text), want, "{text}");
        }
    }

    #[test]
    fn a_size_in_gb_is_read_both_ways() {
        assert_eq!(bytes_both_ways("8 GB"), vec![8_589_934_592, 8_000_000_000]);
        assert_eq!(bytes_both_ways("8 GiB"), vec![8_589_934_592]);
        assert_eq!(bytes_both_ways("512 bytes"), vec![512]);
        // The engine read a runtime's `24.00 GB` as binary; a label of its decimal meaning (or
        // of its printed rounding in bytes) agrees with it, another size does not.
        let got = parse_bytes("24.00 GB").unwrap_or_default();
        assert!(bytes_agree(got, "24.00 GB"));
        assert!(bytes_agree(got, "25.77 GB"));
        assert!(bytes_agree(got, "24.00 GiB"));
        assert!(!bytes_agree(got, "23 GB"));
        let xla = parse_bytes("2.99GiB").unwrap_or_default();
        assert!(bytes_agree(xla, "3206250496 B"));
    }

    #[test]
    fn devices_dtypes_and_shapes_are_normalized() {
        assert_eq!(normalize_device("torch.cuda.FloatTensor"), "cuda");
        assert_eq!(normalize_device("torch.FloatTensor"), "cpu");
        assert_eq!(normalize_device("cuda:1"), "cuda:1");
        assert_eq!(normalize_dtype("torch.cuda.HalfTensor"), "Half");
        assert_eq!(normalize_dtype("torch.bfloat16"), "bfloat16");
        assert_eq!(normalize_dtype("double"), "double");
        assert_eq!(normalize_dtype("f32[3,4]"), "f32");
        assert_eq!(normalize_dtype("Float"), "Float");
        assert_eq!(normalize_dtype("Long"), "Long");
        assert_eq!(normalize_dtype("c10::Half"), "Half");
        assert_eq!(normalize_dtype("tensor(int64)"), "int64");
        assert_eq!(normalize_dtype("c10::BFloat16"), "BFloat16");
        assert_eq!(normalize_dtype("CUDAHalfType"), "Half");
        assert_eq!(normalize_device("CUDAFloatType"), "cuda");
        assert_eq!(
            normalize_shape("[1152, 3, 14, 14]").as_deref(),
            Some("1152x3x14x14")
        );
        assert_eq!(normalize_shape("128 4 2 2").as_deref(), Some("128x4x2x2"));
        assert_eq!(normalize_shape("77x768").as_deref(), Some("77x768"));
        assert_eq!(
            normalize_shape("{1,3,224,224}").as_deref(),
            Some("1x3x224x224")
        );
        assert_eq!(normalize_shape("[]"), None);
        assert_eq!(normalize_shape("[-1, 768]").as_deref(), Some("-1x768"));
        assert_eq!(normalize_shape("f32[1,24]").as_deref(), Some("1x24"));
        assert_eq!(normalize_shape("(1041,)").as_deref(), Some("1041"));
        assert_eq!(
            normalize_shape("torch.Size([4, 10])").as_deref(),
            Some("4x10")
        );
        assert_eq!(normalize_shape("[100 x 170]").as_deref(), Some("100x170"));
        assert_eq!(normalize_shape("(None, 10)").as_deref(), Some("Nonex10"));
        assert_eq!(normalize_shape("[?,128]").as_deref(), Some("?x128"));
    }

    #[test]
    fn two_printed_type_trees_give_the_facts_of_their_first_difference() {
        let caps = |a: &str, b: &str| {
            vec![
                ("tree_1".to_owned(), a.to_owned()),
                ("tree_2".to_owned(), b.to_owned()),
            ]
        };
        let dtype = expand_type_trees(caps(
            "S(p=ShapedArray(float64[19,7,3]), dt=ShapedArray(float16[]), n=ShapedArray(float32[]))",
            "S(p=ShapedArray(float64[19,7,3]), dt=ShapedArray(float16[]), n=ShapedArray(int64[]))",
        ));
        assert_eq!(
            dtype,
            vec![
                ("dtype_1".to_owned(), "float32".to_owned()),
                ("dtype_2".to_owned(), "int64".to_owned())
            ]
        );
        let shape = expand_type_trees(caps("(f32[3], bool[])", "(f32[4], bool[])"));
        assert_eq!(shape[0], ("shape_1".to_owned(), "[3]".to_owned()));
        // Different structures say nothing reliable about one leaf.
        assert!(expand_type_trees(caps("(f32[3],)", "(f32[3], f32[3])")).is_empty());
    }

    #[test]
    fn names_are_canonical_and_scalars_keep_the_first_value() {
        assert_eq!(canonical_name("device_2"), "device");
        assert_eq!(canonical_name("total"), "total");
        assert_eq!(canonical_name("torch_version"), "torch_version");
        let mut f = Facts::default();
        f.record("total", "12.00 GiB");
        f.record("total_2", "80.00 GiB");
        f.record("rank", "3");
        f.record("rank", "0");
        f.record("rank", "3");
        f.record("gpu", "NVIDIA GeForce RTX 3060 Laptop GPU");
        assert_eq!(f.memory.total_bytes, Some(12 * 1024 * 1024 * 1024));
        assert_eq!(f.ranks, vec![0, 3]);
        assert_eq!(f.gpu.as_deref(), Some("NVIDIA GeForce RTX 3060 Laptop GPU"));
    }
}
