/* A stand-in for the NVIDIA driver's libcuda.so.1, compiled by tests/app/worker.rs so the
 * worker's GPU probe runs through cudarc's real dynamic loading without a GPU. It exports the
 * driver entry points the probe calls (cudarc resolves each symbol lazily, on first call) and
 * reports one "Stub GPU": driver 12040 (CUDA 12.4), 80 GiB, compute capability 9.0.
 * STUB_CUDA_DEVICES=0 in the environment makes it a driver without devices: cuInit returns
 * CUDA_ERROR_NO_DEVICE, as the real driver does. */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_INVALID_DEVICE = 101,
       CUDA_ERROR_NO_DEVICE = 100 };
enum { ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };

static int device_count(void) {
    const char *n = getenv("STUB_CUDA_DEVICES");
    return n ? atoi(n) : 1;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return device_count() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 12040;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = device_count();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    (void)dev;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "Stub GPU", (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    (void)dev;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)80 << 30;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
    (void)dev;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case ATTR_CC_MAJOR: *value = 9; return CUDA_SUCCESS;
    case ATTR_CC_MINOR: *value = 0; return CUDA_SUCCESS;
    case 33: *value = 0x3b; return CUDA_SUCCESS; /* CU_DEVICE_ATTRIBUTE_PCI_BUS_ID */
    default: *value = 0; return CUDA_SUCCESS;
    }
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    (void)error;
    if (text) *text = "stub error";
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **text) {
    (void)error;
    if (text) *text = "CUDA_ERROR_STUB";
    return CUDA_SUCCESS;
}
