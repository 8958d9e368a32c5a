//! GPU probe through the CUDA driver API (cudarc, dynamically loaded). A worker states what
//! GPU its results come from (driver version, name, memory, compute capability), and a host
//! without a driver or a device must say so in one line instead of claiming GPU jobs.
//!
//! cudarc panics when `libcuda` cannot be loaded or lacks a symbol, so the library is looked up
//! first (the same search cudarc does) and the probe runs under `catch_unwind` as a last resort.
//! Driver errors are shown by their enum name, never through `cuGetErrorString` (one more symbol
//! a broken library might lack).

use cudarc::driver::{result, sys};
use serde::{Deserialize, Serialize};

/// What the driver says about the GPU a worker runs its jobs on (the `gpu` object of the
/// claim and result requests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// The CUDA ordinal (`--gpu N`).
    pub index: u32,
    /// Device name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// The driver's CUDA version, "12.4".
    pub driver_version: String,
    /// Total device memory in bytes.
    pub total_memory_bytes: u64,
    /// "9.0".
    pub compute_capability: String,
    /// PCI address, "0000:3b:00.0": tells which `/dev/nvidiaN` node is this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
}

/// Why there is no GPU to run on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// No `libcuda.so` on the library search path.
    #[error("no NVIDIA driver: libcuda.so.1 is not on the library search path")]
    NoDriver,
    /// The driver loaded but sees no device.
    #[error("NVIDIA driver {driver} found but it reports no CUDA device")]
    NoDevice {
        /// Driver version ("12.4") or "unknown".
        driver: String,
    },
    /// `--gpu N` is past the last device.
    #[error("--gpu {index}: the driver reports only {count} CUDA device(s)")]
    NoSuchDevice {
        /// The requested ordinal.
        index: u32,
        /// How many devices there are.
        count: i32,
    },
    /// A driver call failed.
    #[error("CUDA driver call {call} failed: {code}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The error's enum name, e.g. `CUDA_ERROR_NOT_INITIALIZED`.
        code: String,
    },
    /// cudarc panicked (a library that lacks an entry point).
    #[error("the CUDA driver library could not be used: {0}")]
    Broken(String),
}

/// Probes device `index`. Never panics.
pub fn probe(index: u32) -> Result<GpuInfo, ProbeError> {
    if !driver_library_present() {
        return Err(ProbeError::NoDriver);
    }
    let outcome = std::panic::catch_unwind(|| probe_loaded(index));
    outcome.unwrap_or_else(|panic| {
        let text = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".to_owned());
        Err(ProbeError::Broken(text))
    })
}

/// Whether cudarc will find a driver library (it searches the same names).
#[allow(unsafe_code)]
fn driver_library_present() -> bool {
    // SAFETY: loading libcuda runs its initialisers, which is what every CUDA program does;
    // the library is unloaded again and cudarc reloads it on first use.
    unsafe { sys::is_culib_present() }
}

fn driver_err(call: &'static str) -> impl Fn(result::DriverError) -> ProbeError {
    move |e| ProbeError::Driver {
        call,
        code: format!("{:?}", e.0),
    }
}

fn probe_loaded(index: u32) -> Result<GpuInfo, ProbeError> {
    let driver = driver_version().map(format_version);
    match result::init() {
        Ok(()) => {}
        Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE => {
            let driver = driver.unwrap_or_else(|_| "unknown".into());
            return Err(ProbeError::NoDevice { driver });
        }
        Err(e) => return Err(driver_err("cuInit")(e)),
    }
    let driver = driver?;
    let count = result::device::get_count().map_err(driver_err("cuDeviceGetCount"))?;
    if count <= 0 {
        return Err(ProbeError::NoDevice { driver });
    }
    let ordinal = i32::try_from(index)
        .ok()
        .filter(|i| *i < count)
        .ok_or(ProbeError::NoSuchDevice { index, count })?;
    let dev = result::device::get(ordinal).map_err(driver_err("cuDeviceGet"))?;
    let name = result::device::get_name(dev).map_err(driver_err("cuDeviceGetName"))?;
    let (memory, major, minor) = device_numbers(dev)?;
    let pci_bus_id = pci_bus_id(dev);
    Ok(GpuInfo {
        index,
        name: name.trim().to_owned(),
        driver_version: driver,
        total_memory_bytes: memory as u64,
        compute_capability: format!("{major}.{minor}"),
        pci_bus_id,
    })
}

#[allow(unsafe_code)]
fn driver_version() -> Result<i32, ProbeError> {
    let mut version = 0;
    // SAFETY: the out-pointer is a live local; cuDriverGetVersion may be called before cuInit.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(driver_err("cuDriverGetVersion"))?;
    Ok(version)
}

/// Total memory and compute capability (major, minor) of a device from `cuDeviceGet`.
#[allow(unsafe_code)]
fn device_numbers(dev: sys::CUdevice) -> Result<(usize, i32, i32), ProbeError> {
    use sys::CUdevice_attribute::{
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
    };
    // SAFETY: `dev` was returned by cuDeviceGet, as these calls require.
    unsafe {
        let memory = result::device::total_mem(dev).map_err(driver_err("cuDeviceTotalMem"))?;
        let attr = driver_err("cuDeviceGetAttribute");
        let major = result::device::get_attribute(dev, MAJOR).map_err(&attr)?;
        let minor = result::device::get_attribute(dev, MINOR).map_err(&attr)?;
        Ok((memory, major, minor))
    }
}

/// The device's PCI address as the driver's `/proc/driver/nvidia/gpus/` names it, when the
/// driver tells.
#[allow(unsafe_code)]
fn pci_bus_id(dev: sys::CUdevice) -> Option<String> {
    use sys::CUdevice_attribute::{
        CU_DEVICE_ATTRIBUTE_PCI_BUS_ID as BUS, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID as DEVICE,
        CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID as DOMAIN,
    };
    // SAFETY: `dev` was returned by cuDeviceGet, as cuDeviceGetAttribute requires.
    let get = |a| unsafe { result::device::get_attribute(dev, a) }.ok();
    Some(format!(
        "{:04x}:{:02x}:{:02x}.0",
        get(DOMAIN)?,
        get(BUS)?,
        get(DEVICE)?
    ))
}

/// The `/dev/nvidia<minor>` number of the GPU at `pci_bus_id`, from the driver's
/// `<gpus_dir>/<pci_bus_id>/information` ("Device Minor: 3").
pub fn device_minor(gpus_dir: &std::path::Path, pci_bus_id: &str) -> Option<u32> {
    let text = std::fs::read_to_string(gpus_dir.join(pci_bus_id).join("information")).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Device Minor:"))
        .and_then(|v| v.trim().parse().ok())
}

/// 12040 -> "12.4", 12080 -> "12.8", 11020 -> "11.2".
fn format_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_versions_are_shown_as_cuda_releases() {
        for (raw, want) in [
            (12040, "12.4"),
            (12080, "12.8"),
            (11020, "11.2"),
            (13000, "13.0"),
        ] {
            assert_eq!(format_version(raw), want);
        }
    }

    #[test]
    fn gpu_facts_serialize_with_the_contract_field_names() {
        let gpu = GpuInfo {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            driver_version: "12.4".into(),
            total_memory_bytes: 85_045_231_616,
            compute_capability: "9.0".into(),
            pci_bus_id: None,
        };
        let json = serde_json::to_value(&gpu).unwrap_or_default();
        let want = serde_json::json!({"index":0,"name":"NVIDIA H100 80GB HBM3",
            "driver_version":"12.4","total_memory_bytes":85045231616u64,"compute_capability":"9.0"});
        assert_eq!(json, want);
    }

    #[test]
    fn the_device_minor_comes_from_the_drivers_information_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let gpu = dir.path().join("0000:3b:00.0");
        std::fs::create_dir(&gpu).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            gpu.join("information"),
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 180\nDevice Minor: \t 3\nBus Location: \t 0000:3b:00.0\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(device_minor(dir.path(), "0000:3b:00.0"), Some(3));
        assert_eq!(device_minor(dir.path(), "0000:5e:00.0"), None);
    }
}
